-- top: count one per-user cap denial, for `notifier top`.
--
-- KEYS[1]  {<prefix>top:<channel>}:<hour>   sorted set: user -> denials in that hour (UTC)
-- ARGV[1]  the user id
-- ARGV[2]  retention, ms (how long an hour's set is kept)
-- ARGV[3]  the most users kept per hour
--
-- Memory stays bounded: when an hour's set outgrows ARGV[3], the users
-- with the fewest denials are dropped down to half of it (the ones that
-- matter, hitting their caps continuously, are at the top).
--
-- Reply: the user's denials in that hour (integer)
local n = redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
local keep = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -math.floor(keep / 2) - 1)
end
redis.call('PEXPIRE', KEYS[1], ttl_ms(whole('retention', ARGV[2], 1, MAX_TTL_MS)))
return tonumber(n)
