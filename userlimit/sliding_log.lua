-- sliding_log.lua: one exact sliding-log decision for one (channel, user).
--
-- KEYS[1]  the log: sorted set, member = job id, score = admission time (µs)
-- ARGV[1]  limit: most jobs admitted in any window (integer >= 1)
-- ARGV[2]  window in µs (integer >= 1000)
-- ARGV[3]  job id; an id already in the log is allowed again without counting
-- ARGV[4]  optional: now in µs (tests only); production reads TIME
-- Reply    {allowed 1|0, remaining, retry_after_us}; retry_after_us is 0 when allowed
--
-- A job admitted at t counts while now < t + window. The log expires one
-- second after its newest entry leaves the window.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local job = ARGV[3]
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Integers travel to Redis as decimal strings; Lua's own conversion may use
-- an exponent and drop digits.
local function str(n) return string.format('%.0f', n) end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', str(now - window))
local count = redis.call('ZCARD', KEYS[1])

if redis.call('ZSCORE', KEYS[1], job) then
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  return {1, remaining, 0}
end

if count < limit then
  redis.call('ZADD', KEYS[1], str(now), job)
  redis.call('PEXPIRE', KEYS[1], str(math.ceil(window / 1000) + 1000))
  return {1, limit - count - 1, 0}
end

-- Denied: allowed again when the entry that brings the count below limit
-- leaves the window.
local entry = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return {0, 0, tonumber(entry[2]) + window - now}
