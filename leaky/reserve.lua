-- reserve.lua: take the next send slot of a provider's virtual queue (GCRA).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq (write counter), node (writer's run_id)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  inc:  µs this reservation adds to tat (⌈cost × interval⌉)
-- ARGV[2]  mqd:  max queue delay, µs
-- ARGV[3]  cold: µs ahead of now a queue with no trusted state starts (mqd + ⌈max cost × interval⌉)
-- ARGV[4]  idle: ms the state outlives its drained queue
-- ARGV[5]  now:  µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[6]  guard: "1" to trust only a state written by this server run (run_id), "0" not to check
--
-- Reply: {1, delay µs, slot µs, seq} when reserved,
--        {0, retry-after µs, 0, 0} when the queue is full.
--
-- A state with no tat, or (guard) written by another Redis server or an
-- earlier run of this one (failover, restart from disk: possibly older than
-- slots already handed out), is not trusted: tat = max(tat, now + cold), i.e.
-- a full queue.
local inc = tonumber(ARGV[1])
local mqd = tonumber(ARGV[2])
local cold = tonumber(ARGV[3])
local idle = tonumber(ARGV[4])
local now
if ARGV[5] ~= nil and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local guard = ARGV[6] == '1'
local node = '-'
if guard then
  node = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

local st = redis.call('HMGET', KEYS[1], 'tat', 'seq', 'node')
local tat = tonumber(st[1])
local seq = tonumber(st[2]) or 0
local trusted = tat ~= nil and (st[3] == node or not guard)
if not trusted then
  tat = math.max(tat or 0, now + cold)
end

local slot = math.max(now, tat)
local pause = tonumber(redis.call('GET', KEYS[2]))
if pause ~= nil and pause > slot then
  slot = pause
end

if slot - now > mqd then
  if not trusted then
    -- remember the cold start, or the next call would start cold again
    redis.call('HSET', KEYS[1], 'tat', tat, 'seq', seq + 1, 'node', node)
    redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + mqd) / 1000) + idle)
  end
  return {0, slot - now - mqd, 0, 0}
end

seq = seq + 1
tat = slot + inc
redis.call('HSET', KEYS[1], 'tat', tat, 'seq', seq, 'node', node)
redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + mqd) / 1000) + idle)
return {1, slot - now, slot, seq}
