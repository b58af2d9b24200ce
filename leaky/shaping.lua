-- shaping.lua: the adaptive-rate arithmetic reserve.lua and pause.lua share,
-- prepended to each when the scripts are built (redis.go), after
-- internal/luapre's num.lua, whose idiv (floor(a / b) exactly) it uses. It
-- is the Lua twin of shapePlan in shaping.go: the same integer steps, so
-- that Memory and Redis agree to the quantum.
--
-- Rates are integers in quanta of 1e-6 units/s; times are µs.

-- effective is the rate at now after the last decrease (to r0 at t0): it
-- climbs by incq a second from quiet after t0 (the climb at most dcap
-- long), never below minr nor above rate. No decrease recorded: rate.
local function effective(rate, minr, incq, quiet, dcap, r0, t0, now)
  if r0 == nil or r0 <= 0 or t0 == nil then
    return rate
  end
  local dt = math.min(math.max(now - t0 - quiet, 0), dcap)
  local secs = idiv(dt, 1000000)
  local eff = r0 + incq * secs + idiv(incq * (dt - secs * 1000000), 1000000)
  return math.min(rate, math.max(minr, eff))
end

-- climbed is how long after a decrease to r the rate is back at rate:
-- quiet, then the climb (at most dcap), µs.
local function climbed(rate, r, incq, quiet, dcap)
  return quiet + math.min(idiv(rate - r + incq - 1, incq) * 1000000, dcap)
end

