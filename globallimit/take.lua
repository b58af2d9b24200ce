-- take.lua: take up to n tokens from the fleet's token bucket.
--
-- KEYS[1]  {<prefix>g}  string: tat, µs (the bucket is full when tat <= now)
-- ARGV[1]  rate:  tokens per second (a float, as Go's shortest round-trip text)
-- ARGV[2]  burst: bucket size
-- ARGV[3]  n:     tokens wanted (>= 1)
-- ARGV[4]  now:   µs since the Unix epoch (optional, tests only; default: Redis TIME)
--
-- Reply: {granted, wait µs}; wait is when the next token is due when
-- granted < n, else 0.
--
-- The maths mirror take() in store.go operation for operation, so that the
-- Go and Redis stores give identical answers: em(k) = ceil(k * 1e6 / rate).
--
-- The arguments must be in Config's ranges (config.go), checked before
-- anything is written: rate from 1/86400 to 1e6, burst and n whole from 1
-- to 1e6, the refill em(burst) at most MaxRefill (24 h). Every value is
-- then an integer below 2^53, and the key lives at most a day and a
-- second. A tat more than MaxRefill ahead was written by no valid Config
-- (a rate of 1e-15 once wrote 1e21 µs, and the fleet stayed stopped after
-- the rate was fixed): it is read as no state, as a lost key is (a full
-- bucket), and the next grant writes a good one.
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua
-- (ttl, arg, whole).
local max_refill = 86400000000 -- MaxRefill, µs
local rate = arg('rate', ARGV[1], 1 / 86400, 1000000)
local burst = whole('burst', ARGV[2], 1, 1000000)
local n = whole('n', ARGV[3], 1, 1000000)
local now = now_us(ARGV[4])

local function em(k)
  return math.ceil(k * 1000000 / rate)
end

local full = whole('refill em(burst)', em(burst), 1, max_refill)
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
if tat - now > max_refill then
  tat = 0
end
local base = math.max(tat, now)
local room = now + full - base
local g = 0
if room > 0 then
  g = math.min(math.floor(room * rate / 1000000), n)
  while g > 0 and em(g) > room do
    g = g - 1
  end
  while g < n and em(g + 1) <= room do
    g = g + 1
  end
end

local newtat = base + em(g)
if g > 0 then
  -- a second past tat the bucket is full, which a missing key also means
  redis.call('SET', KEYS[1], newtat, 'PX', ttl(newtat - now))
end
local wait = 0
if g < n then
  wait = math.max(0, newtat + em(1) - full - now)
end
return {g, wait}
