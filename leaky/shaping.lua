-- shaping.lua: the adaptive-rate arithmetic reserve.lua and pause.lua share,
-- prepended to each when the scripts are built (redis.go), after
-- internal/luapre's num.lua, whose idiv (floor(a / b) exactly) it uses. It
-- is the Lua twin of shapePlan in shaping.go: the same integer steps, so
-- that Memory and Redis agree to the quantum.
--
-- Rates are integers in quanta of 1e-6 units/s; times are µs. The state of
-- the last backoff is r0 (the rate it set), t0 (its time) and tg (the
-- target, just under where the provider's limit was met; 0 or absent: a
-- state of before targets, which climbs to the rate without a hold).

-- climb is the rise over d µs of climbing at incq quanta a second, d at
-- most dcap.
local function climb(incq, dcap, d)
  d = math.min(math.max(d, 0), dcap)
  local secs = idiv(d, 1000000)
  return incq * secs + idiv(incq * (d - secs * 1000000), 1000000)
end

-- probe is the rise over d µs of probing: the climb, plus the climb
-- floored by convex (ms) times d in ms (at most 1e6), every value below
-- 2^53.
local function probe(incq, dcap, convex, d)
  local c = climb(incq, dcap, d)
  return c + idiv(c, convex) * math.min(idiv(math.max(d, 0), 1000), 1000000)
end

-- adaptive is the rate at now from the state (r0, t0, tg) and its phase
-- there: 0 held (quiet, the hold, at minr or at rate), 1 ramping back to
-- the target (a probe that starts before the ramp reached it only speeds
-- the ramp), 2 probing above it. r0 during quiet, then min(tg, r0 +
-- climb) plus, from hold after quiet, the probe; never below minr nor
-- above rate. No backoff recorded: rate.
local function adaptive(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, now)
  if r0 == nil or r0 <= 0 or t0 == nil then
    return rate, 0
  end
  tg = tg or 0
  local d = now - t0 - quiet
  local eff, phase = r0, 0
  if d > 0 then
    local target = rate
    if tg > 0 then
      target = tg
    end
    eff = r0 + climb(incq, dcap, d)
    if eff < target then
      phase = 1
    end
    eff = math.min(eff, target)
    if tg > 0 and d > hold then
      eff = eff + probe(incq, dcap, convex, d - hold)
      if phase ~= 1 then
        phase = 2
      end
    end
  end
  if eff >= rate then
    return rate, 0
  end
  if eff <= minr then
    return minr, 0
  end
  return eff, phase
end

-- effective is the rate at now (adaptive's first result).
local function effective(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, now)
  local eff = adaptive(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, now)
  return eff
end

-- climbed is how long after a backoff to r the rate is back at rate, at
-- most: quiet, the hold, then the climb (at most dcap), µs.
local function climbed(rate, r, incq, quiet, dcap, hold)
  return quiet + hold + math.min(idiv(rate - r + incq - 1, incq) * 1000000, dcap)
end
