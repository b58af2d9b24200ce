-- hold: note a job a user's cap refused, to go into the user's next
-- digest; say whether it already went into one.
--
-- KEYS[1]  the user's digest hash, {<prefix>dg:<cap key hash>}
-- ARGV[1]  the job's id within its tenant
-- ARGV[2]  the job's expires_at, µs since the epoch (0: none)
-- ARGV[3]  the hash's TTL, ms
-- ARGV[4]  now, µs (tests only; '' reads TIME)
--
-- Fields: as take.lua's.
--
-- A job already in a digest is not held again; a job held already keeps
-- the instant it was first held.
--
-- Reply: {held} — the jobs held now — or {held, digest, state, count, ids}
-- for a job already in a digest (ids: its members, as I:<digest> keeps
-- them).
--
-- Prepended (store.go): internal/luapre's now.lua (now_us) and num.lua.
local now = now_us(ARGV[4])
local id = ARGV[1]
local exp = whole('expires_at', ARGV[2], 0, EXACT)
local keep = ttl_ms(whole('ttl', ARGV[3], 1, MAX_TTL_MS))
local key = KEYS[1]
local digest = redis.call('HGET', key, 'd:' .. id)
if not digest then
  redis.call('HSETNX', key, 'h:' .. id, string.format('%.0f %.0f', exp, now))
  redis.call('PEXPIRE', key, keep)
end
local held = 0
local fields = redis.call('HKEYS', key)
for _, f in ipairs(fields) do
  if string.sub(f, 1, 2) == 'h:' then held = held + 1 end
end
if digest then
  local st = redis.call('HGET', key, 'D:' .. digest) or 'published 0'
  local state, count = string.match(st, '(%a+) (%d+)')
  return {held, digest, state, tonumber(count), redis.call('HGET', key, 'I:' .. digest) or ''}
end
return {held}
