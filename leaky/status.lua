-- status.lua: read a provider's queue length and pause, without changing them.
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq, node (see reserve.lua)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  now: µs since the Unix epoch (optional, tests only; default: Redis TIME)
--
-- Reply: {queued µs = max(0, tat − max(now, pause)), paused for µs =
-- max(0, pause − now)}: the queue counts the slots after the pause, not the
-- pause itself (which status shows apart).
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us).
local now = now_us(ARGV[1])
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat')) or now
local pause = tonumber(redis.call('GET', KEYS[2])) or now
return {math.max(0, tat - math.max(now, pause)), math.max(0, pause - now)}
