-- fixed_window.lua: one fixed-window decision for one (channel, user).
--
-- KEYS[1]  the counter: hash {w = window index floor(now / window), n = jobs admitted in it}
-- KEYS[2]  the job's marker: string, the µs instant it lapses (admission + window)
-- ARGV[1]  limit: most jobs admitted per window (integer >= 1)
-- ARGV[2]  window in µs (integer >= 1000); windows are aligned to the Unix epoch
-- ARGV[3]  job id (unused here: it is in KEYS[2])
-- ARGV[4]  optional: now in µs (tests only); production reads TIME
-- Reply    {allowed 1|0, remaining, retry_after_us}; retry_after_us is 0 when allowed
--
-- A job whose marker has not lapsed is allowed again without counting. The
-- counter expires one second after its window ends, the marker one second
-- after it lapses.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function str(n) return string.format('%.0f', n) end
-- floor(a / b), exact for integers below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end

local idx = idiv(now, window)
local wend = (idx + 1) * window
local state = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 0
if tonumber(state[1]) == idx then n = tonumber(state[2]) end

local marker = tonumber(redis.call('GET', KEYS[2]))
if marker and marker > now then
  local remaining = limit - n
  if remaining < 0 then remaining = 0 end
  return {1, remaining, 0}
end

if n >= limit then
  return {0, 0, wend - now}
end

if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'n', 1)
else
  redis.call('HSET', KEYS[1], 'w', str(idx), 'n', 1)
end
redis.call('PEXPIRE', KEYS[1], ttl(wend - now))
redis.call('SET', KEYS[2], str(now + window), 'PX', ttl(window))
return {1, limit - n - 1, 0}
