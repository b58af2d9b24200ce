-- authfail.lua: count one failed authentication of a client IP in a fixed window.
--
-- KEYS[1]  {<prefix>gwauth:<ip>}  string: failures in the window; the key's
--          expiry (Redis' clock) ends the window
-- ARGV[1]  window, ms (at most 24 h, auth_failures.window's range: a longer
--          one is taken as 24 h, and a key with a longer expiry, as 24 h)
--
-- Reply: {failures in the window, this one included; ms until the window ends}
--
-- Prepended (limits.go): internal/luapre's num.lua (whole, ttl_ms): an
-- argument that is not a whole number of ms stops the script with an error.
local window = tonumber(ttl_ms(math.min(whole('window', ARGV[1], 1, MAX_TTL_MS), 86400000)))
local n = redis.call('INCR', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
if n == 1 or left < 0 or left > window then
  redis.call('PEXPIRE', KEYS[1], ttl_ms(window))
  left = window
end
return {n, left}
