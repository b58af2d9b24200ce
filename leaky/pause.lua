-- pause.lua: pause a provider until now + d (a 429's Retry-After).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq, node (see reserve.lua)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  d:    the pause, µs (> 0)
-- ARGV[2]  idle: ms the state outlives its drained queue
-- ARGV[3]  now:  µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[4]  the pub/sub channel to announce the pause on (PauseChannel), or ''
-- ARGV[5]  the provider's name, for the announcement
-- ARGV[6…16] Backoff of an adaptive contract only (absent otherwise): rate,
--          min (quanta, 1e-6 units/s), decrease (a float), increase (quanta
--          per second), quiet (µs), dcap (µs), hold (µs), keep (a float),
--          lag (µs), ease (a float), the probe's convexity (ms); see
--          reserve.lua and shaping.go
--
-- Reply: {the pause end µs, 1 when the adaptive rate was lowered else 0}.
--
-- Backoff sets the adaptive rate once per pause: only when no pause was in
-- force at the call (so that the workers that met the same 429 set it
-- once), as shapePlan.backoff does in shaping.go: the throttled sends were
-- paced at e, the rate (shaping.lua's adaptive) at te = now − lag − the
-- queue's depth (tat − now, read before the pause moves tat; scaled by the
-- rate now over e when e is lower: the queue held as many slots then; at
-- most a minute either way), not before the last backoff's t0. In a probe (at te or
-- now): r0 = tg = max(tg, min, ⌊e × keep⌋); in a ramp: r0 = tg = max(min,
-- ⌊e × keep⌋); else r0 = max(min, ⌊e × d⌋), d the decrease, or ease when it
-- is gentler and the state held a target found by a ramp or a probe (r0 =
-- tg), and tg = max(r0, ⌊e × keep⌋). Recorded as r0, t0 = now, tg in
-- KEYS[1] (a missing tat stays missing); the state then lives at least
-- until the climb back reaches the rate. It reports a lowering when r0 is
-- below the rate at now.
--
-- The announcement is "<pause left, µs> <provider>": a duration, not an
-- instant, so that a receiver's clock does not matter. Every process of the
-- fleet subscribes (PauseWatcher) and knows of the pause without asking.
--
-- The pause end only grows. An existing tat is pushed to at least the pause
-- end (every later slot waits); a missing one is left missing, so that the
-- next reservation still starts cold (reserve.lua also waits for the pause).
--
-- The arguments are checked as reserve.lua's are, before anything is
-- written; expiries go through ttl and ttl_ms: none past luapre.MaxTTL.
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua (str,
-- idiv, ttl, ttl_ms, whole, arg), then shaping.lua (adaptive, effective,
-- climbed).
local d = whole('d', ARGV[1], 1, EXACT / 4)
local idle = whole('idle', ARGV[2], 0, MAX_TTL_MS)
local now = now_us(ARGV[3])
local shaped = ARGV[6] ~= nil and ARGV[6] ~= '' -- an adaptive contract's Backoff
local rate, minr, dec, incq, quiet, dcap, hold, keepf, lag, ease, convex
if shaped then
  rate = whole('rate', ARGV[6], 1, 1e13)
  minr = whole('min', ARGV[7], 1, rate)
  dec = arg('decrease', ARGV[8], 0, 1)
  incq = whole('increase', ARGV[9], 1, 9e9)
  quiet = whole('quiet', ARGV[10], 0, EXACT / 4)
  dcap = whole('dcap', ARGV[11], 0, EXACT)
  hold = whole('hold', ARGV[12], 0, EXACT / 4)
  keepf = arg('keep', ARGV[13], 0, 1)
  lag = whole('lag', ARGV[14], 0, EXACT / 4)
  ease = arg('ease', ARGV[15], 0, 1)
  convex = whole('convex', ARGV[16], 1, EXACT / 4)
end

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
local depth = 0
if tat ~= nil and tat > now then
  depth = math.min(tat - now, 60000000)
end
if tat ~= nil and tat < pause then
  redis.call('HSET', KEYS[1], 'tat', pause)
  redis.call('HINCRBY', KEYS[1], 'seq', 1)
  local keep = math.ceil((pause - now) / 1000) + idle
  if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], ttl_ms(keep))
  end
end

-- adaptive, effective and climbed come from shaping.lua, prepended.
local lowered = 0
if shaped and not inforce then
  local st = redis.call('HMGET', KEYS[1], 'r0', 't0', 'tg')
  local r0, t0, tg = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  local state = r0 ~= nil and r0 > 0 and t0 ~= nil
  tg = tg or 0
  local before, nowphase = adaptive(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, now)
  local te = now - lag - depth
  if state then
    te = math.max(te, t0)
  end
  local e, phase = adaptive(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, te)
  if e < before and depth > 0 then
    te = now - lag - math.min(math.floor(depth * before / e), 60000000)
    if state then
      te = math.max(te, t0)
    end
    e, phase = adaptive(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, te)
  end
  local near = math.max(minr, math.floor(e * keepf))
  local r, target = near, near
  if phase == 2 or nowphase == 2 then
    r = math.max(near, tg)
    target = r
  elseif phase ~= 1 and nowphase ~= 1 then
    if tg > 0 and r0 == tg then
      dec = math.max(dec, ease)
    end
    r = math.max(minr, math.floor(e * dec))
    target = math.max(r, near)
  end
  redis.call('HSET', KEYS[1], 'r0', r, 't0', now, 'tg', target)
  if r < before then
    lowered = 1
  end
  local keep = math.ceil(climbed(rate, r, incq, quiet, dcap, hold) / 1000) + 1000
  if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], ttl_ms(keep))
  end
end
return {pause, lowered}
