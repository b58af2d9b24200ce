-- cancel.lua: give back an unused reservation when nothing followed it.
--
-- KEYS[1]  {<prefix>p:<provider>}:tat  hash: tat (µs), seq, node (see reserve.lua)
-- ARGV[1]  slot: the reservation's slot, µs
-- ARGV[2]  inc:  µs the reservation added to tat
-- ARGV[3]  seq:  the state's write counter after the reservation
--
-- Reply: 1 when tat went back to the slot, 0 when it could not.
--
-- Only when tat still ends at this reservation (no later reservation, pause
-- or cancel: seq unchanged) and the state is this server's own (not a
-- replica's copy that may have lost later reservations) does tat go back to
-- the slot: the previous reservation ended at or before it, so no two sends
-- come closer than the contract.
local slot = tonumber(ARGV[1])
local inc = tonumber(ARGV[2])
local seq = tonumber(ARGV[3])
local node = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local st = redis.call('HMGET', KEYS[1], 'tat', 'seq', 'node')
if tonumber(st[1]) ~= slot + inc or tonumber(st[2]) ~= seq or st[3] ~= node then
  return 0
end
redis.call('HSET', KEYS[1], 'tat', slot, 'seq', seq + 1)
return 1
