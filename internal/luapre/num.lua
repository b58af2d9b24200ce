-- num.lua (internal/luapre): integer helpers, prepended to the scripts that
-- count in µs. Lua numbers are doubles: integers are exact below 2^53.

-- EXACT is 2^53: every integer below it is exact in a Lua number.
local EXACT = 9007199254740992

-- MAX_TTL_MS is the longest expiry any script writes, ms (luapre.MaxTTL,
-- 735 days): the worst case of the configuration's ranges (a per-user
-- cap's state lives two windows of 366 days past an instant up to 48 h
-- ahead, SPEC §4). No key outlives it, whatever a script computed.
local MAX_TTL_MS = 63504000000

-- str is n as a decimal integer string. Integers travel to Redis as decimal
-- strings; Lua's own conversion (tostring, ..) may use an exponent and drop
-- digits.
local function str(n) return string.format('%.0f', n) end

-- floor(a / b), exact for integers below 2^53 (the float quotient can round
-- up to the next integer).
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- ttl_ms is an expiry of ms milliseconds, as str, held to [1, MAX_TTL_MS]
-- (a NaN to MAX_TTL_MS: a limiter's state is never dropped early). The
-- expiries of one script run mostly repeat (one per rule or lease, not
-- per job), so each is formatted once a run: string.format is what a
-- script spends most on outside Redis's commands (docs/benchmarks.md).
local ttl_memo = {}
local function ttl_ms(ms)
  local v = ttl_memo[ms]
  if v ~= nil then return v end
  local c = ms
  if not (c <= MAX_TTL_MS) then c = MAX_TTL_MS end
  if c < 1 then c = 1 end
  v = str(math.ceil(c))
  if ms == ms then ttl_memo[ms] = v end -- a NaN is no table key
  return v
end

-- ttl is the expiry, ms as str, of a key that matters for us more µs: one
-- second past that, at most MAX_TTL_MS.
local function ttl(us) return ttl_ms(math.ceil(us / 1000) + 1000) end

-- fmt is a range bound as an argument error shows it: an integer as one,
-- a fraction with 17 significant digits.
local function fmt(x)
  if x == math.floor(x) and x > -EXACT and x < EXACT then return str(x) end
  return string.format('%.17g', x)
end

-- num is tonumber(v), memoized for the run: a run's arguments mostly
-- repeat (one rule, lease or increment for many jobs), and tonumber of a
-- string costs about 1,000 instructions (Lua 5.1 converts it twice, to
-- test and to read it), as much as a fifth of a Redis command.
local num_memo = {}
local function num(v)
  local n = num_memo[v]
  if n == nil then
    n = tonumber(v)
    if n ~= nil and v == v then num_memo[v] = n end -- a NaN is no table key
  end
  return n
end

-- arg is the argument v (a string or number) as a number when it is one
-- from lo to hi; whole also wants an integer. Otherwise the script stops
-- with an error naming the argument, its value and the range, before it
-- has written anything (every script checks its arguments first).
local function arg(name, v, lo, hi, int)
  local n = num(v)
  if n == nil or not (n >= lo and n <= hi) or (int and n ~= math.floor(n)) then
    local what = 'a number'
    if int then what = 'an integer' end
    error({err = 'ERR argument ' .. name .. ' out of range: ' .. tostring(v) ..
      ' (want ' .. what .. ' from ' .. fmt(lo) .. ' to ' .. fmt(hi) .. ')'})
  end
  return n
end
local function whole(name, v, lo, hi) return arg(name, v, lo, hi, true) end
