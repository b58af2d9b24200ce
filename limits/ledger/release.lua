-- release: give up the caller's lease of a job without counting anything
-- (a deferral, a shutdown) and, for an end, note how the job left the
-- pipeline unsent; for a deferral, note why the job was put off and until
-- when. (A sent job's record is ledger_sent.lua's.)
--
-- KEYS[1]  the job's ledger hash, {<prefix>j:<id>}
-- ARGV[1]  owner token of the caller
-- ARGV[2]  record TTL (dedup_ttl), integer milliseconds
-- ARGV[3]  absent for a plain release; else what to note:
--            "dead" | "suppressed"  an end (the lease is given up)
--            "deferred"             a deferral (the lease is given up)
--            "waiting"              a wait the job makes holding its lease
--                                   (its send slot is far): nothing released
-- ARGV[4]  the reason, a word of the dispatcher's own list (Notifier-Reason:
--          user_limit, rejected...; a deferral's: user_limit,
--          provider_paused, slot...), never a provider's text
-- ARGV[5]  a deferral or a wait: how long, integer milliseconds
-- ARGV[6]  a deferral or a wait: now, integer microseconds (tests only;
--          '' reads TIME)
--
-- Fields beside claim's (ledger_claim.lua): x = the outcome of a job that
-- was not sent (dead | suppressed), r = its reason; w = why the job was
-- last put off, u = until when (µs of the Redis clock), n = how many times
-- it was put off.
--
-- The lease (o, l) is cleared when the caller holds it (but for a wait);
-- an end also sets x and r, a deferral or a wait w and u (a deferral counts
-- in n), unless the job was sent (a sent job's record is kept as it is).
-- The record then lives dedup_ttl more, or longer while it holds a lease
-- (keep.lua: a wait, another owner's lease, a sent record).
--
-- Reply: attempts so far (integer)
--
-- Prepended (ledger.go): internal/luapre's now.lua (now_us) and num.lua
-- (whole, ttl_ms), and keep.lua (keep_record): every argument is checked before anything is written.
local keep = whole('dedup_ttl', ARGV[2], 1, MAX_TTL_MS)
local key = KEYS[1]
local note = ARGV[3]
local until_us
if note == 'deferred' or note == 'waiting' then
  until_us = now_us(ARGV[6]) + whole('delay', ARGV[5], 0, MAX_TTL_MS) * 1000
elseif note ~= nil and note ~= 'dead' and note ~= 'suppressed' then
  return redis.error_reply('ERR release: unknown note ' .. tostring(note))
end
if note ~= 'waiting' and redis.call('HGET', key, 'o') == ARGV[1] then
  redis.call('HDEL', key, 'o', 'l')
end
if note ~= nil and redis.call('HGET', key, 's') ~= '1' then
  if until_us == nil then
    redis.call('HSET', key, 'x', note, 'r', ARGV[4])
  else
    redis.call('HSET', key, 'w', ARGV[4], 'u', until_us)
    if note == 'deferred' then
      redis.call('HINCRBY', key, 'n', 1)
    end
  end
end
keep_record(key, keep)
return tonumber(redis.call('HGET', key, 'a')) or 0
