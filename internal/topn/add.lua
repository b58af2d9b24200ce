-- add.lua: add counts to one UTC hour of a top-N series (internal/topn).
--
-- KEYS[1]  {<prefix><series>}:<yyyymmddhh>  sorted set: member -> its count in that hour
-- ARGV[1]  retention, ms (how long the hour's set is kept)
-- ARGV[2]  the most members the hour keeps, 0 for no bound
-- ARGV[2k+1], ARGV[2k+2]  a member and the count to add to it, k >= 1
--
-- Memory stays bounded: when the set outgrows ARGV[2], the members with
-- the lowest counts are dropped down to half of it (the ones that matter,
-- counted again and again, are at the top).
--
-- Reply: the number of members counted (integer).
--
-- Prepended (topn.go): internal/luapre's num.lua (whole, ttl_ms): every
-- argument is checked before anything is written.
local keep = ttl_ms(whole('retention', ARGV[1], 1, MAX_TTL_MS))
local most = whole('most members', ARGV[2], 0, EXACT)
for i = 3, #ARGV, 2 do
  whole('count', ARGV[i + 1], 0, EXACT)
end
for i = 3, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
end
if most > 0 and redis.call('ZCARD', KEYS[1]) > most then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -math.floor(most / 2) - 1)
end
redis.call('PEXPIRE', KEYS[1], keep)
return (#ARGV - 2) / 2
