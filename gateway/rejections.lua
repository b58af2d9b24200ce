-- rejections.lua: add a gateway instance's rejections per key, for `notifier top --gateway`.
--
-- KEYS[1]  {<prefix>gwtop}:<hour>  sorted set: key name -> rejected requests in that hour (UTC)
-- ARGV[1]  retention, ms (how long an hour's set is kept)
-- ARGV[2k], ARGV[2k+1]  a key name (or "unauthenticated") and its count, k >= 1
--
-- The members are configured key names, so the set stays as small as the
-- configuration. Reply: the number of members counted.
--
-- Prepended (limits.go): internal/luapre's num.lua (whole, ttl_ms): every
-- argument is checked before anything is written.
local keep = ttl_ms(whole('retention', ARGV[1], 1, MAX_TTL_MS))
for i = 2, #ARGV, 2 do
  whole('count', ARGV[i + 1], 0, 9007199254740992)
end
for i = 2, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], keep)
return (#ARGV - 1) / 2
