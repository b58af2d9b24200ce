-- shape.lua: read a provider's shaping state, without changing it.
--
-- KEYS[1]  {<prefix>p:<provider>}:tat  hash: r0, t0, tg, q<j>s, q<j>u (see reserve.lua)
-- ARGV[1]  now: µs since the Unix epoch (optional, tests only; default: Redis TIME)
-- ARGV[2]  nq:  the number of quotas
--
-- Reply: {now, r0, t0, tg, q1s, q1u, …}, every absent field 0. The effective
-- rate and each quota's window are worked out in Go (shaping.go), as the
-- Memory backend does.
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us).
local now = now_us(ARGV[1])
local fields = {'r0', 't0', 'tg'}
for j = 1, tonumber(ARGV[2]) do
  fields[#fields + 1] = 'q' .. j .. 's'
  fields[#fields + 1] = 'q' .. j .. 'u'
end
local st = redis.call('HMGET', KEYS[1], unpack(fields))
local out = {now}
for i = 1, #st do
  out[#out + 1] = tonumber(st[i]) or 0
end
return out
