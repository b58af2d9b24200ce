-- now.lua (internal/luapre): prepended to the scripts that take an
-- optional now argument.
--
-- now_us(arg) is the time in µs since the Unix epoch: arg when it is given
-- (an integer; tests only, so that a fake clock can drive a script), else
-- the Redis clock (TIME), so that one clock rules the fleet.
local function now_us(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
