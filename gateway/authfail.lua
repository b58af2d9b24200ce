-- authfail.lua: count one failed authentication of a client IP in a fixed window.
--
-- KEYS[1]  {<prefix>gwauth:<ip>}  string: failures in the window; the key's
--          expiry (Redis' clock) ends the window
-- ARGV[1]  window, ms
--
-- Reply: {failures in the window, this one included; ms until the window ends}
local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if n == 1 or ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
