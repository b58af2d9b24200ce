-- take.lua: take n tokens from each of one or more token buckets (GCRA), all or
-- nothing: the gateway's capacity bucket, a tenant's and a key's at once.
--
-- KEYS[i]  {<prefix>gw}:<kind>:<name>  string: tat, µs (the bucket is full when tat <= now)
-- ARGV[1]  n:     tokens wanted from every bucket, 0 to the smallest burst (0: only read)
-- ARGV[2]  now:   µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[3]  limit: µs, the furthest a bucket's state may be ahead of now (the
--          largest burst/rate the configuration allows, MaxWindow)
-- ARGV[2+2i], ARGV[3+2i]  bucket i's rate (tokens per second, a float, as Go's
--          shortest round-trip text) and burst (>= 1)
--
-- Reply: {allowed 1|0, then for each bucket i: remaining, wait µs, reset µs}
--   remaining  whole tokens left in the bucket after this call
--   wait       how long until the bucket holds n tokens (0 when it does now)
--   reset      how long until the bucket is full again
--
-- In bucket i one token refills every em(1) µs, em(k) = ceil(k * 1e6 / rate);
-- it holds at most burst. n tokens are taken when, in every bucket,
-- max(tat, now) + em(n) - now <= em(burst); else nothing changes, so a client
-- that waits the longest wait and asks again for n gets them unless someone
-- else took tokens meanwhile.
--
-- Clamps (MaxWindow): a rate slower than burst per limit is taken as that
-- (no valid configuration has one), so every quantity stays an integer of
-- µs below now + limit, exact in Lua's doubles. A bucket's state is never
-- further ahead than min(em(burst), limit). A tat read further ahead (written under another
-- configuration, a slower rate, or corrupt) is read, and written back, as
-- that much, so the bucket is empty and refills at the configured rate
-- instead of refusing until the stored instant; and no key is written with
-- an expiry past limit (+1 s).
--
-- Prepended (limits.go): internal/luapre's now.lua (now_us) and num.lua
-- (str, ttl).
local n = tonumber(ARGV[1])
local now = now_us(ARGV[2])
local limit = tonumber(ARGV[3])

local k = #KEYS
local rate, burst, full, tat, new, clamped = {}, {}, {}, {}, {}, {}

local function em(i, x)
  return math.ceil(x * 1000000 / rate[i])
end

-- whole tokens in bucket i when its tat is t
local function left(i, t)
  local room = now + full[i] - t
  if room <= 0 then
    return 0
  end
  local x = math.floor(room * rate[i] / 1000000)
  if x > burst[i] then
    x = burst[i]
  end
  while x > 0 and em(i, x) > room do
    x = x - 1
  end
  while x < burst[i] and em(i, x + 1) <= room do
    x = x + 1
  end
  return x
end

local allowed = 1
for i = 1, k do
  burst[i] = tonumber(ARGV[3 + 2 * i])
  -- no slower than refilling the whole burst within limit
  rate[i] = math.max(tonumber(ARGV[2 + 2 * i]), burst[i] * 1000000 / limit)
  full[i] = math.min(em(i, burst[i]), limit)
  local t = tonumber(redis.call('GET', KEYS[i])) or 0
  if t < now then
    t = now
  elseif t > now + full[i] then
    t = now + full[i]
    clamped[i] = true
  end
  tat[i] = t
  new[i] = t + em(i, n)
  if new[i] - now > full[i] then
    allowed = 0
  end
end

local reply = {allowed}
for i = 1, k do
  local t, wait = tat[i], 0
  if allowed == 1 and n > 0 then
    t = new[i]
  elseif new[i] - now > full[i] then
    wait = new[i] - full[i] - now
  end
  if t ~= tat[i] or clamped[i] then
    -- a second past tat the bucket is full, which a missing key also means
    redis.call('SET', KEYS[i], str(t), 'PX', ttl(t - now))
  end
  reply[#reply + 1] = left(i, t)
  reply[#reply + 1] = wait
  reply[#reply + 1] = t - now
end
return reply
