-- claim: take the send lease of one job, or say why not.
--
-- KEYS[1]  the job's ledger hash, {<prefix>j:<id>}
-- ARGV[1]  owner token of the caller (unique per delivery attempt)
-- ARGV[2]  lease length, integer milliseconds
-- ARGV[3]  record TTL (dedup_ttl), integer milliseconds
-- ARGV[4]  optional: now, integer microseconds (tests only; production reads TIME)
--
-- Fields: s = 1 once sent; a = transient provider failures so far;
--         o = lease owner; l = lease end (µs of the Redis clock).
--
-- Reply: { status, attempts, busy_ms }
--   status 0 = claimed by the caller (a new lease, or the caller's own lease extended)
--   status 1 = already sent: the caller must not send
--   status 2 = another owner holds an unexpired lease; busy_ms until it ends
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local key = KEYS[1]
local rec = redis.call('HMGET', key, 's', 'a', 'o', 'l')
local attempts = tonumber(rec[2]) or 0
if rec[1] == '1' then
  return {1, attempts, 0}
end
local owner = rec[3]
local lease_end = tonumber(rec[4]) or 0
if owner and owner ~= ARGV[1] and lease_end > now then
  return {2, attempts, math.ceil((lease_end - now) / 1000)}
end
redis.call('HSET', key, 'o', ARGV[1], 'l', now + tonumber(ARGV[2]) * 1000)
redis.call('PEXPIRE', key, ARGV[3])
return {0, attempts, 0}
