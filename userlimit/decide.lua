
-- decide.lua: the driver every per-user cap script ends with. The
-- algorithm's file above defines decide(key, marker, limit, window, job,
-- now, at, move) -> allowed, remaining, retry_after_us, at_us; this runs it
-- for one decision or for several in a row (the decisions of many jobs
-- that share a Redis node and slot: the same answers, in order, as that
-- many calls at one instant).
--
-- A decision is for an instant: now (at = ''), or a given instant at
-- (integer µs; an earlier one is taken as now), the time the job will
-- really be sent (its send slot). Decided for now, a job already admitted
-- is allowed again where its admission stands (a redelivery counts once).
-- Decided for a given instant, a job admitted at another instant is moved:
-- its admission is withdrawn and the job decided anew for at, and a
-- denied job then holds no admission at all.
--
-- KEYS      per decision, in order: its state key, then (the O(1)
--           algorithms) its job marker; see Keys
-- ARGV[1]   now in µs ('' reads TIME; tests only)
-- ARGV[2]   keys per decision (1 or 2)
-- ARGV[4i-1 .. 4i+2]  decision i (1-based): limit (integer >= 1), window
--           in µs (integer >= 1000), job id, at in µs or ''
-- Reply     four integers per decision, in order: allowed 1|0, remaining,
--           retry_after_us (0 when allowed), the instant in µs the job's
--           admission stands at (0 when denied)
--
-- Every decision's arguments are checked, before any is decided, against
-- Rule's ranges (rule.go): limit an integer from 1 to 1e9, window from
-- 1000 µs to 366 days, at at most MaxAhead (48 h) after now. Every instant
-- is then an integer below 2^53, and no state lives longer than
-- 48 h + 2 × 366 days + 1 s (luapre.MaxTTL bounds every expiry anyway).
-- One out of range stops the script with an error naming it, nothing
-- written.
--
-- now_us comes from internal/luapre's now.lua, prepended (redis.go) with
-- num.lua (whole) before the algorithm's file.
local now = now_us(ARGV[1])
local nkeys = whole('keys per decision', ARGV[2], 1, 2)
local max_ahead = 172800000000 -- MaxAhead, µs
for a = 3, #ARGV, 4 do
  whole('limit', ARGV[a], 1, 1e9)
  whole('window', ARGV[a + 1], 1000, 31622400000000)
  if ARGV[a + 3] ~= '' then
    whole('at', ARGV[a + 3], 0, now + max_ahead)
  end
end
local out = {}
local first, o = 1, 0
for a = 3, #ARGV, 4 do
  local at, move = now, false
  if ARGV[a + 3] ~= '' then
    at, move = math.max(num(ARGV[a + 3]), now), true
  end
  local allowed, remaining, retry, stands = decide(KEYS[first], KEYS[first + 1], num(ARGV[a]), num(ARGV[a + 1]), ARGV[a + 2], now, at, move)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = allowed, remaining, retry, stands
  o = o + 4
  first = first + nkeys
end
return out
