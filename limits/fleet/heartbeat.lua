-- heartbeat: announce one instance, forget the silent ones, count the live.
--
-- KEYS[1]  sorted set of instances, score = last heartbeat (ms of the Redis clock)
-- KEYS[2]  hash of instance -> info (a short JSON object written by the instance)
-- ARGV[1]  this instance's id
-- ARGV[2]  its info
-- ARGV[3]  liveness: an instance silent this long (ms) is gone
-- ARGV[4]  "leave" to remove the instance instead (a clean stop)
--
-- Both keys share the hash tag {<prefix>fleet} and expire when the whole
-- fleet has been silent for three liveness periods.
--
-- Reply: the number of live instances (integer)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live_ms = whole('live', ARGV[3], 1, MAX_TTL_MS)
if ARGV[4] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - live_ms))
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[2], id)
end
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - live_ms))
end
redis.call('PEXPIRE', KEYS[1], ttl_ms(live_ms * 3))
redis.call('PEXPIRE', KEYS[2], ttl_ms(live_ms * 3))
return redis.call('ZCARD', KEYS[1])
