-- pause.lua: pause a provider until now + d (a 429's Retry-After).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq, node (see reserve.lua)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  d:    the pause, µs (> 0)
-- ARGV[2]  idle: ms the state outlives its drained queue
-- ARGV[3]  now:  µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[4]  the pub/sub channel to announce the pause on (PauseChannel), or ''
-- ARGV[5]  the provider's name, for the announcement
--
-- Reply: the pause end, µs.
--
-- The announcement is "<pause left, µs> <provider>": a duration, not an
-- instant, so that a receiver's clock does not matter. Every process of the
-- fleet subscribes (PauseWatcher) and knows of the pause without asking.
--
-- The pause end only grows. An existing tat is pushed to at least the pause
-- end (every later slot waits); a missing one is left missing, so that the
-- next reservation still starts cold (reserve.lua also waits for the pause).
local d = tonumber(ARGV[1])
local idle = tonumber(ARGV[2])
local now
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local pause = now + d
local old = tonumber(redis.call('GET', KEYS[2]))
if old == nil or old < pause then
  -- a second past the end, so a reader never races the expiry
  redis.call('SET', KEYS[2], pause, 'PX', math.ceil(d / 1000) + 1000)
else
  pause = old
end

if ARGV[4] ~= nil and ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], string.format('%.0f', pause - now) .. ' ' .. ARGV[5])
end

local tat = tonumber(redis.call('HGET', KEYS[1], 'tat'))
if tat ~= nil and tat < pause then
  redis.call('HSET', KEYS[1], 'tat', pause)
  redis.call('HINCRBY', KEYS[1], 'seq', 1)
  local ttl = math.ceil((pause - now) / 1000) + idle
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end
return pause
