
-- decide.lua: the driver every per-user cap script ends with. The
-- algorithm's file above defines decide(state, marker, limit, window, job,
-- now) -> allowed, remaining, retry_after_us; this runs it for one decision
-- or for several in a row (the decisions of many jobs that share a Redis
-- node and slot: the same answers, in order, as that many calls at one
-- instant).
--
-- KEYS      per decision, in order: its state key, then (the O(1)
--           algorithms) its job marker; see Keys
-- ARGV[1]   now in µs ('' reads TIME; tests only)
-- ARGV[2]   keys per decision (1 or 2)
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]  decision i (1-based): limit (integer
--           >= 1), window in µs (integer >= 1000), job id
-- Reply     three integers per decision, in order: allowed 1|0, remaining,
--           retry_after_us (0 when allowed)
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nkeys = tonumber(ARGV[2])
local out = {}
local first = 1
for a = 3, #ARGV, 3 do
  local allowed, remaining, retry = decide(KEYS[first], KEYS[first + 1], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2], now)
  out[#out + 1] = allowed
  out[#out + 1] = remaining
  out[#out + 1] = retry
  first = first + nkeys
end
return out
