-- num.lua (internal/luapre): integer helpers, prepended to the scripts that
-- count in µs. Lua numbers are doubles: integers are exact below 2^53.

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

-- ttl is the expiry, ms as str, of a key that matters for us more µs: one
-- second past that.
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end
