-- pause.lua: pause a provider until now + d (a 429's Retry-After).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq, node (see reserve.lua)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  d:    the pause, µs (> 0)
-- ARGV[2]  idle: ms the state outlives its drained queue
-- ARGV[3]  now:  µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[4]  the pub/sub channel to announce the pause on (PauseChannel), or ''
-- ARGV[5]  the provider's name, for the announcement
-- ARGV[6…11] Backoff of an adaptive contract only (absent otherwise): rate,
--          min (quanta, 1e-6 units/s), decrease (a float), increase (quanta
--          per second), quiet (µs), dcap (µs); see reserve.lua
--
-- Reply: {the pause end µs, 1 when the adaptive rate was lowered else 0}.
--
-- Backoff lowers the adaptive rate once per pause: only when no pause was in
-- force at the call (so that the workers that met the same 429 lower it
-- once), to max(min, ⌊eff × decrease⌋) from the effective rate eff now
-- (reserve.lua's formula), recorded as r0, t0 = now in KEYS[1] (a missing
-- tat stays missing). The state then lives at least until the climb back
-- reaches the rate.
--
-- The announcement is "<pause left, µs> <provider>": a duration, not an
-- instant, so that a receiver's clock does not matter. Every process of the
-- fleet subscribes (PauseWatcher) and knows of the pause without asking.
--
-- The pause end only grows. An existing tat is pushed to at least the pause
-- end (every later slot waits); a missing one is left missing, so that the
-- next reservation still starts cold (reserve.lua also waits for the pause).
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua (str,
-- idiv, ttl), then shaping.lua (effective, climbed).
local d = tonumber(ARGV[1])
local idle = tonumber(ARGV[2])
local now = now_us(ARGV[3])

local pause = now + d
local old = tonumber(redis.call('GET', KEYS[2]))
local inforce = old ~= nil and old > now
if old == nil or old < pause then
  -- a second past the end, so a reader never races the expiry
  redis.call('SET', KEYS[2], pause, 'PX', ttl(d))
else
  pause = old
end

if ARGV[4] ~= nil and ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], str(pause - now) .. ' ' .. ARGV[5])
end

local tat = tonumber(redis.call('HGET', KEYS[1], 'tat'))
if tat ~= nil and tat < pause then
  redis.call('HSET', KEYS[1], 'tat', pause)
  redis.call('HINCRBY', KEYS[1], 'seq', 1)
  local keep = math.ceil((pause - now) / 1000) + idle
  if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], keep)
  end
end

-- effective and climbed come from shaping.lua, prepended.
local lowered = 0
if ARGV[6] ~= nil and ARGV[6] ~= '' and not inforce then
  local rate = tonumber(ARGV[6])
  local minr = tonumber(ARGV[7])
  local dec = tonumber(ARGV[8])
  local incq = tonumber(ARGV[9])
  local quiet = tonumber(ARGV[10])
  local dcap = tonumber(ARGV[11])
  local st = redis.call('HMGET', KEYS[1], 'r0', 't0')
  local r0, t0 = tonumber(st[1]), tonumber(st[2])
  local eff = effective(rate, minr, incq, quiet, dcap, r0, t0, now)
  local r = math.max(minr, math.floor(eff * dec))
  redis.call('HSET', KEYS[1], 'r0', r, 't0', now)
  if r < eff then
    lowered = 1
  end
  local keep = math.ceil(climbed(rate, r, incq, quiet, dcap) / 1000) + 1000
  if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], keep)
  end
end
return {pause, lowered}
