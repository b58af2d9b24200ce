-- release: give up the caller's lease of a job without counting anything
-- (a deferral, a shutdown) and, for an end, note how the job left the
-- pipeline unsent. (A sent job needs no script: RedisLedger.SentCmd sets
-- s = 1.)
--
-- KEYS[1]  the job's ledger hash, {<prefix>j:<id>}
-- ARGV[1]  owner token of the caller
-- ARGV[2]  record TTL (dedup_ttl), integer milliseconds
-- ARGV[3]  an end only (absent for a plain release): "dead" | "suppressed"
-- ARGV[4]  an end only: the reason, a word of the dispatcher's own list
--          (Notifier-Reason: user_limit, rejected...), never a provider's
--          text
--
-- Fields beside claim's (ledger_claim.lua): x = the outcome of a job that
-- was not sent (dead | suppressed), r = its reason.
--
-- The lease (o, l) is cleared when the caller holds it; an end also sets x
-- and r unless the job was sent (a sent job's record is kept as it is). The
-- record then lives dedup_ttl more.
--
-- Reply: attempts so far (integer)
local key = KEYS[1]
if redis.call('HGET', key, 'o') == ARGV[1] then
  redis.call('HDEL', key, 'o', 'l')
end
if ARGV[3] ~= nil and redis.call('HGET', key, 's') ~= '1' then
  redis.call('HSET', key, 'x', ARGV[3], 'r', ARGV[4])
end
redis.call('PEXPIRE', key, ARGV[2])
return tonumber(redis.call('HGET', key, 'a')) or 0
