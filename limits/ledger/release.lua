-- release: give up the caller's lease of a job without counting anything
-- (a deferral, a shutdown) and, for an end, note how the job left the
-- pipeline unsent; for a deferral, note why the job was put off and until
-- when. (A sent job's record is sent.lua's.)
--
-- KEYS[1]  the job's ledger record, {<prefix>j:<id>} (record.lua)
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
-- Fields beside claim's (claim.lua): x = the outcome of a job that
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
-- (whole, ttl_ms), record.lua, update.lua (load, store) and keep.lua (keep_record):
-- every argument is checked before anything is written.
local keep = whole('dedup_ttl', ARGV[2], 1, MAX_TTL_MS)
local key = KEYS[1]
local note = ARGV[3]
local until_us
if note == 'deferred' or note == 'waiting' then
  until_us = now_us(ARGV[6]) + whole('delay', ARGV[5], 0, MAX_TTL_MS) * 1000
elseif note ~= nil and note ~= 'dead' and note ~= 'suppressed' then
  return redis.error_reply('ERR release: unknown note ' .. tostring(note))
end
local rec = load(key) or {}
if note ~= 'waiting' and rec.o == ARGV[1] then
  rec.o, rec.l = nil, nil
end
if note ~= nil and rec.s ~= '1' then
  if until_us == nil then
    rec.x, rec.r = note, ARGV[4]
  else
    rec.w, rec.u = ARGV[4], until_us
    if note == 'deferred' then
      rec.n = (tonumber(rec.n) or 0) + 1
    end
  end
end
if store(key, rec) then
  keep_record(key, rec, keep)
end
return tonumber(rec.a) or 0
