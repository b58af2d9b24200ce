-- cancel.lua: give back an unused reservation when nothing followed it.
--
-- KEYS[1]  {<prefix>p:<provider>}:tat  hash: tat (µs), seq, node (see reserve.lua)
-- ARGV[1]  slot: the reservation's slot, µs
-- ARGV[2]  inc:  µs the reservation added to tat
-- ARGV[3]  seq:  the state's write counter after the reservation
-- ARGV[4]  guard: "1" to refuse a state not written by this server run (run_id)
-- ARGV[5]  nq:   a shaped reservation's number of quotas (optional; 0 or absent: none)
-- ARGV[6]  cost: its units (with nq)
-- ARGV[7…] per:  each quota's window, µs (with nq)
--
-- Reply: 1 when tat went back to the slot, 0 when it could not.
--
-- When tat cannot go back (a later reservation followed), the slot is still
-- given up: its units leave each quota window that is the slot's own and
-- still the one the state counts in, so a window's sends never fall short
-- of its limit for slots nobody used (a worker that woke late, a pause
-- found at the slot). Never twice for one reservation: the caller gives
-- each up once.
--
-- Only when tat still ends at this reservation (no later reservation, pause
-- or cancel: seq unchanged) and (guard) the state is this server run's own,
-- not a replica's copy that may have lost later reservations, does tat go
-- back to the slot: the previous reservation ended at or before it, so no two sends
-- come closer than the contract. Its units then leave every quota's count:
-- nothing followed it, so each quota's window (q<j>s, q<j>u, see reserve.lua)
-- is still the one it counted in.
-- Prepended (redis.go): runid.lua (run_id).
local slot = tonumber(ARGV[1])
local inc = tonumber(ARGV[2])
local seq = tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'tat', 'seq', 'node')
if ARGV[4] == '1' and st[3] ~= run_id() then
  return 0
end
local rolled = tonumber(st[1]) == slot + inc and tonumber(st[2]) == seq
if rolled then
  redis.call('HSET', KEYS[1], 'tat', slot, 'seq', seq + 1)
end
local nq = tonumber(ARGV[5]) or 0
if nq > 0 then
  local cost = tonumber(ARGV[6])
  for j = 1, nq do
    local f = 'q' .. j .. 'u'
    local used = tonumber(redis.call('HGET', KEYS[1], f))
    local mine = rolled
    if not rolled then
      local per = tonumber(ARGV[6 + j])
      local qs = tonumber(redis.call('HGET', KEYS[1], 'q' .. j .. 's'))
      mine = per ~= nil and qs ~= nil and qs == slot - (slot % per)
    end
    if mine and used ~= nil and used >= cost then
      redis.call('HSET', KEYS[1], f, used - cost)
    end
  end
end
if rolled then
  return 1
end
return 0
