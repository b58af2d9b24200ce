-- hold: note a job a user's cap refused, to go into the user's next
-- digest; say whether it already went into one.
--
-- KEYS[1]  the user's digest hash, {<prefix>dg:<cap key hash>}
-- ARGV[1]  the job's id within its tenant
-- ARGV[2]  the job's expires_at, µs since the epoch (0: none)
-- ARGV[3]  the hash's TTL, ms
-- ARGV[4]  now, µs (tests only; '' reads TIME)
-- ARGV[5]  the most jobs held at once (digest.MaxHeld)
--
-- Fields: as take.lua's.
--
-- A job already in a digest is not held again; a job held already keeps
-- the instant it was first held; a new job when ARGV[5] are held is not
-- held. O(1): the held jobs are counted in the held field.
--
-- Reply: {held} — the jobs held now — or {held, digest, state, count, ids}
-- for a job already in a digest (ids: its first members, as I:<digest>
-- keeps them, while it is pending; '' once published), or {held, 0}: the
-- job is not held, ARGV[5] being held already.
--
-- Prepended (store.go): internal/luapre's now.lua (now_us) and num.lua,
-- and held.lua (held_count).
local now = now_us(ARGV[4])
local id = ARGV[1]
local exp = whole('expires_at', ARGV[2], 0, EXACT)
local keep = ttl_ms(whole('ttl', ARGV[3], 1, MAX_TTL_MS))
local most = whole('max_held', ARGV[5], 1, EXACT)
local key = KEYS[1]
local digest = redis.call('HGET', key, 'd:' .. id)
local held = held_count(key)
if digest then
  local st = redis.call('HGET', key, 'D:' .. digest) or 'published 0'
  local state, count = string.match(st, '^(%a+) (%d+)')
  local ids = ''
  if state == 'pending' then ids = redis.call('HGET', key, 'I:' .. digest) or '' end
  return {held, digest, state, tonumber(count), ids}
end
if redis.call('HEXISTS', key, 'h:' .. id) == 0 then
  if held >= most then return {held, 0} end
  redis.call('HSET', key, 'h:' .. id, string.format('%.0f %.0f', exp, now))
  held = held + 1
  redis.call('HSET', key, 'held', held)
end
redis.call('PEXPIRE', key, keep)
return {held}
