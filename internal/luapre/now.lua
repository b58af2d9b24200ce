-- now.lua (internal/luapre): prepended to the scripts that take an
-- optional now argument.
--
-- now_us(arg) is the time in µs since the Unix epoch: arg when it is given
-- (an integer; tests only, so that a fake clock can drive a script), else
-- the Redis clock (TIME), so that one clock rules the fleet. An arg that
-- is not an integer from 0 to 2^53 stops the script with an error.
local function now_us(arg)
  if arg ~= nil and arg ~= '' then
    local n = tonumber(arg)
    if n == nil or not (n >= 0 and n <= 9007199254740992) or n ~= math.floor(n) then
      error({err = 'ERR argument now out of range: ' .. tostring(arg) .. ' (want an integer from 0 to 9007199254740992)'})
    end
    return n
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
