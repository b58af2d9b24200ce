-- take.lua: take tokens from one or more token buckets (GCRA) at once, up
-- to n from every bucket and at least least, or none: a batch takes all or
-- nothing (least = n: the gateway's capacity, tenant and key buckets), a
-- lease as many as there are up to n (least = 1: the fleet's bucket), and
-- n = least = 0 only reads.
--
-- KEYS[i]  bucket i's key  string: tat, µs (the bucket is full when tat <= now)
-- ARGV[1]  n:     tokens wanted from every bucket, least to 10^6 (0 when least is 0)
-- ARGV[2]  least: the fewest worth taking, 0 to 10^6 (0: only read)
-- ARGV[3]  now:   µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[4]  limit: µs, the furthest a bucket's state may be ahead of now
-- ARGV[5]  clamp: 1 to clamp what is out of range, 0 to refuse it (Ranges)
-- ARGV[4+2i], ARGV[5+2i]  bucket i's rate (tokens per second, a float, as
--          Go's shortest round-trip text, at most 10^6) and burst (1 to 10^6)
--
-- Reply: {granted, then for each bucket i: remaining, wait µs, reset µs}
--   granted    the tokens taken from every bucket: the most up to n that
--              every bucket holds when that is at least least, else 0
--   remaining  whole tokens left in the bucket after this call
--   wait       0 when n were granted; else how long until the bucket holds
--              least tokens more than this call left it (a client that
--              waits the longest wait and asks again gets them, unless
--              someone else took tokens meanwhile)
--   reset      how long until the bucket is full again
--
-- In bucket i one token refills every em(1) µs, em(k) = ceil(k * 1e6 / rate);
-- it holds at most burst, full = em(burst). At now its state tat reads as
-- base = max(tat, now), room = now + full - base µs of tokens; g tokens are
-- there when em(g) <= room. Taking g moves tat to base + em(g). The maths
-- mirror decide() in store.go operation for operation, so that the Go and
-- Redis stores give identical answers.
--
-- Ranges. With clamp 0 (the fleet's bucket, whose Config this package
-- validates) an argument out of range stops the script with an error
-- naming it, before anything is written: rate from 10^6/limit, em(burst)
-- at most limit. A state is time owed: one further ahead than full (after
-- a configuration change) is kept, and one more than limit ahead, which no
-- valid configuration writes, reads as no state, as a lost key (a full
-- bucket); the next grant writes a good one. With clamp 1 (the gateway's
-- buckets, whose limits another package validates) a rate slower than
-- burst per limit is taken as that and full is at most limit; a state
-- further ahead than full (written under another configuration, or
-- corrupt) is read, and written back, as full, so the bucket is empty and
-- refills at the configured rate instead of refusing until the stored
-- instant. Either way every quantity stays an integer of µs below
-- now + limit, exact in Lua's doubles, and no key is written with an
-- expiry past limit (+1 s).
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua
-- (str, ttl, arg, whole).
local least = whole('least', ARGV[2], 0, 1000000)
local most = 1000000
if least == 0 then
  most = 0
end
local n = whole('n', ARGV[1], least, most)
local now = now_us(ARGV[3])
local limit = whole('limit', ARGV[4], 1, MAX_TTL_MS * 1000)
local clamp = whole('clamp', ARGV[5], 0, 1) == 1

local k = #KEYS
local rate, burst, full, base, clamped = {}, {}, {}, {}, {}

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

for i = 1, k do
  burst[i] = whole('burst', ARGV[5 + 2 * i], 1, 1000000)
  if clamp then
    -- no slower than refilling the whole burst within limit
    rate[i] = math.max(arg('rate', ARGV[4 + 2 * i], 0, 1000000), burst[i] * 1000000 / limit)
    full[i] = math.min(em(i, burst[i]), limit)
  else
    rate[i] = arg('rate', ARGV[4 + 2 * i], 1000000 / limit, 1000000)
    full[i] = whole('refill em(burst)', em(i, burst[i]), 1, limit)
  end
end

local granted = n
for i = 1, k do
  local t = tonumber(redis.call('GET', KEYS[i])) or 0
  if clamp and t > now + full[i] then
    t = now + full[i]
    clamped[i] = true
  elseif not clamp and t - now > limit then
    t = 0
  end
  base[i] = math.max(t, now)
  -- g: the most tokens up to n that bucket i holds
  local room = now + full[i] - base[i]
  local g = 0
  if room > 0 then
    g = math.min(math.floor(room * rate[i] / 1000000), n)
    while g > 0 and em(i, g) > room do
      g = g - 1
    end
    while g < n and em(i, g + 1) <= room do
      g = g + 1
    end
  end
  granted = math.min(granted, g)
end
if granted < least then
  granted = 0
end

local reply = {granted}
for i = 1, k do
  local t, wait = base[i] + em(i, granted), 0
  if granted < n then
    wait = math.max(0, t + em(i, least) - full[i] - now)
  end
  if granted > 0 or clamped[i] then
    -- a second past tat the bucket is full, which a missing key also means
    redis.call('SET', KEYS[i], str(t), 'PX', ttl(t - now))
  end
  reply[#reply + 1] = left(i, t)
  reply[#reply + 1] = wait
  reply[#reply + 1] = t - now
end
return reply
