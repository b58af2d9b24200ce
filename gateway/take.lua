-- take.lua: take n tokens, all or nothing, from one API key's token bucket (GCRA).
--
-- KEYS[1]  {<prefix>gw:<key name>}  string: tat, µs (the bucket is full when tat <= now)
-- ARGV[1]  rate:  tokens per second (a float, as Go's shortest round-trip text)
-- ARGV[2]  burst: bucket size (>= 1)
-- ARGV[3]  n:     tokens wanted, 0 to burst (0: only read the bucket)
-- ARGV[4]  now:   µs since the Unix epoch (optional, tests only; default: Redis TIME)
--
-- Reply: {allowed 1|0, remaining, wait µs, reset µs}
--   remaining  whole tokens left after this call
--   wait       when refused: how long until n tokens are there (0 when allowed)
--   reset      how long until the bucket is full again
--
-- One token refills every em(1) µs, em(k) = ceil(k * 1e6 / rate); the bucket
-- holds at most burst. n tokens are taken when max(tat, now) + em(n) - now <=
-- em(burst); a refusal changes nothing, so a client that waits `wait` and asks
-- again for n gets them unless someone else took tokens meanwhile.
--
-- Prepended (limits.go): internal/luapre's now.lua (now_us) and num.lua
-- (str, ttl).
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local now = now_us(ARGV[4])

local function em(k)
  return math.ceil(k * 1000000 / rate)
end

local full = em(burst)
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
if tat < now then
  tat = now
end

-- whole tokens in the bucket when its tat is t
local function left(t)
  local room = now + full - t
  if room <= 0 then
    return 0
  end
  local k = math.floor(room * rate / 1000000)
  while k > 0 and em(k) > room do
    k = k - 1
  end
  while k < burst and em(k + 1) <= room do
    k = k + 1
  end
  return k
end

if n == 0 then
  return {1, left(tat), 0, tat - now}
end
local new = tat + em(n)
if new - now > full then
  return {0, left(tat), new - full - now, tat - now}
end
-- a second past tat the bucket is full, which a missing key also means
redis.call('SET', KEYS[1], str(new), 'PX', ttl(new - now))
return {1, left(new), 0, new - now}
