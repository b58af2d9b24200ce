-- resume.lua: lift a provider's pause before its end (`notifier resume`).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq, node (see reserve.lua)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  horizon: µs, the contract's max_queue_delay plus one send's
--          interval at the largest cost (the cold start's lead)
-- ARGV[2]  now: µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[3]  the pub/sub channel to announce on (PauseChannel), or ''
-- ARGV[4]  the provider's name, for the announcement
--
-- Reply: the pause left when it was lifted, µs (0: there was none).
--
-- The pause pushed tat to its end. No slot granted before it lies past
-- now + max_queue_delay (a reservation past that is refused), so tat is
-- pulled back to now + horizon, never pushed forward: later slots follow
-- every slot already granted, and sends resume within max_queue_delay.
-- The announcement "0 <provider>" clears the pause in every process's
-- watcher.
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua
-- (whole: a horizon out of range stops the script before it writes).
local horizon = whole('horizon', ARGV[1], 0, EXACT / 2)
local now = now_us(ARGV[2])
local pause = tonumber(redis.call('GET', KEYS[2]))
local left = 0
if pause ~= nil and pause > now then
  left = pause - now
end
redis.call('DEL', KEYS[2])
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat'))
if tat ~= nil and tat > now + horizon then
  redis.call('HSET', KEYS[1], 'tat', now + horizon)
  redis.call('HINCRBY', KEYS[1], 'seq', 1)
end
if ARGV[3] ~= nil and ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], '0 ' .. ARGV[4])
end
return left
