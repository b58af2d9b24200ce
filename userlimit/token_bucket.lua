-- token_bucket.lua: one token-bucket decision for one (channel, user), as GCRA.
--
-- KEYS[1]  the bucket: string, the theoretical arrival time tat in µs
-- KEYS[2]  the job's marker: string, the µs instant it lapses (admission + window)
-- ARGV[1]  limit: the burst, and the tokens refilled per window (integer >= 1)
-- ARGV[2]  window in µs (integer >= 1000)
-- ARGV[3]  job id (unused here: it is in KEYS[2])
-- ARGV[4]  optional: now in µs (tests only); production reads TIME
-- Reply    {allowed 1|0, remaining, retry_after_us}; retry_after_us is 0 when allowed
--
-- One token every T = ceil(window / limit) µs; the bucket is full when
-- tat <= now. A job is allowed when max(tat, now) + T - now <= limit * T.
-- The bucket expires one second after it is full again.

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

local T = idiv(window + limit - 1, limit)
local burst = limit * T
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end

local marker = tonumber(redis.call('GET', KEYS[2]))
if marker and marker > now then
  local remaining = idiv(burst - (tat - now), T)
  if remaining < 0 then remaining = 0 end
  return {1, remaining, 0}
end

local new = tat + T
if new - now > burst then
  return {0, 0, new - now - burst}
end

redis.call('SET', KEYS[1], str(new), 'PX', ttl(new - now))
redis.call('SET', KEYS[2], str(now + window), 'PX', ttl(window))
return {1, idiv(burst - (new - now), T), 0}
