-- reserve.lua: take the next send slots of a provider's virtual queue (GCRA),
-- for one reservation or several in a row (the reservations of many jobs
-- in one script run: the same answers, in order, as that many calls at one
-- instant).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq (write counter), node (writer's run_id)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  mqd:  max queue delay, µs
-- ARGV[2]  cold: µs ahead of now a queue with no trusted state starts (mqd + ⌈max cost × interval⌉)
-- ARGV[3]  idle: ms the state outlives its drained queue
-- ARGV[4]  now:  µs since the Unix epoch (optional, tests only: '' for Redis TIME)
-- ARGV[5]  guard: "1" to trust only a state written by this server run (run_id), "0" not to check
-- ARGV[6…] inc:  µs each reservation adds to tat (⌈cost × interval⌉), one per reservation, in order
--
-- Reply: four integers per reservation, in order:
--        {1, delay µs, slot µs, seq} when reserved,
--        {0, retry-after µs, 0, 0} when the queue is full.
--
-- A state with no tat, or (guard) written by another Redis server or an
-- earlier run of this one (failover, restart from disk: possibly older than
-- slots already handed out), is not trusted: tat = max(tat, now + cold), i.e.
-- a full queue. The first reservation that finds it so writes it back (the
-- cold start is remembered, or the next call would start cold again); each
-- reservation made adds one to seq, as does remembering a cold start.
local mqd = tonumber(ARGV[1])
local cold = tonumber(ARGV[2])
local idle = tonumber(ARGV[3])
local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local guard = ARGV[5] == '1'
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
local pause = tonumber(redis.call('GET', KEYS[2]))

local out = {}
local dirty = false
for i = 6, #ARGV do
  local slot = math.max(now, tat)
  if pause ~= nil and pause > slot then
    slot = pause
  end
  local reserved = slot - now <= mqd
  if reserved or not trusted then
    seq = seq + 1
    dirty = true
  end
  trusted = true
  if reserved then
    tat = slot + tonumber(ARGV[i])
    out[#out + 1] = 1
    out[#out + 1] = slot - now
    out[#out + 1] = slot
    out[#out + 1] = seq
  else
    out[#out + 1] = 0
    out[#out + 1] = slot - now - mqd
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
end
if dirty then
  redis.call('HSET', KEYS[1], 'tat', tat, 'seq', seq, 'node', node)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now + mqd) / 1000) + idle)
end
return out
