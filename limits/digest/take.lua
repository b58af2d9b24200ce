-- take: the job allowed by a user's cap takes the user's held jobs into one
-- digest, or is told to go alone.
--
-- KEYS[1]  the user's digest hash, {<prefix>dg:<cap key hash>}
-- ARGV[1]  the job's id within its tenant (the trigger)
-- ARGV[2]  the job's expires_at, µs since the epoch (0: none)
-- ARGV[3]  the hash's TTL, ms
-- ARGV[4]  now, µs (tests only; '' reads TIME)
-- ARGV[5]  when the cap allowed the trigger, µs ('' or 0: now)
-- ARGV[6]  the most member ids I:<digest> keeps (digest.MaxMembers)
--
-- Fields: h:<id> = a held job: "<expires_at µs, 0: none> <held at µs>"
--         (or its expires_at alone, as written before the held instant
--         was kept: held at 0);
--         d:<id> = the digest a job went into;
--         held = how many h: fields there are (hold.lua and take.lua
--         keep it; held.lua counts them once in a hash without it);
--         D:<digest> = "<state> <count> <taken at µs>" (state pending or
--         published; or "<state> <count>" alone, as written before the
--         taken instant was kept: the next take that reads the hash gives
--         it now);
--         I:<digest> = the first ARGV[6] of the digest's job ids,
--         space-separated, sorted, while it is pending (dropped when
--         published: only a pending digest's publisher needs them).
--
-- The jobs held when the cap allowed the trigger (not those held after
-- it: they were refused because the trigger took the cap, and wait for the
-- next window's digest) and not yet expired, and the trigger, in id order,
-- are the digest's members when they are two or more: each gets d:<id> = digest,
-- the digest's id is "digest-" and the first 24 hex digits of the SHA-1 of
-- its members' ids (one digest for one set, however often it is asked), and
-- D:<digest> is "pending <count>". Fewer: the trigger is taken off the held
-- jobs and goes alone.
--
-- A trigger already in a digest (another process took it meanwhile) is
-- told so, and nothing changes. With no job held (the held count: O(1))
-- the trigger goes alone at once; else the hash is read whole, and the
-- digests taken longer than the TTL ago are dropped with their d: and I:
-- fields (as the whole hash would be after a TTL without a hold or a take:
-- their jobs came back long since), so that a user who never pauses long
-- enough for the hash to expire does not keep every job ever digested.
--
-- Reply: {} (alone), {digest, count, id1, id2, ...}, or {digest, -1} (the
-- trigger was in that digest already)
--
-- Prepended (store.go): internal/luapre's now.lua (now_us) and num.lua,
-- and held.lua (held_count).
local now = now_us(ARGV[4])
local trigger = ARGV[1]
local texp = whole('expires_at', ARGV[2], 0, EXACT)
local keep = ttl_ms(whole('ttl', ARGV[3], 1, MAX_TTL_MS))
local most = whole('max_members', ARGV[6], 1, EXACT)
local allowed = now
if ARGV[5] ~= nil and ARGV[5] ~= '' and ARGV[5] ~= '0' then
  allowed = whole('allowed_at', ARGV[5], 0, EXACT)
end
local key = KEYS[1]
local already = redis.call('HGET', key, 'd:' .. trigger)
if already then return {already, -1} end
local held = held_count(key)
if held == 0 then return {} end
local fields = redis.call('HGETALL', key)
local keep_us = tonumber(keep) * 1000
local old = {} -- digests taken longer than keep ago
for i = 1, #fields, 2 do
  local f, v = fields[i], fields[i + 1]
  if string.sub(f, 1, 2) == 'D:' then
    local taken_at = string.match(v, '^%a+ %d+ (%d+)$')
    if not taken_at then
      redis.call('HSET', key, f, v .. ' ' .. str(now))
    elseif tonumber(taken_at) + keep_us < now then
      local d = string.sub(f, 3)
      old[d] = true
      redis.call('HDEL', key, f, 'I:' .. d)
    end
  end
end
local members = {}
local has_trigger = false
for i = 1, #fields, 2 do
  local f, v = fields[i], fields[i + 1]
  if string.sub(f, 1, 2) == 'h:' then
    local id = string.sub(f, 3)
    local e, at = string.match(v, '^(%d+) (%d+)$')
    local exp, held_at = tonumber(e or v) or 0, tonumber(at) or 0
    if id == trigger then
      has_trigger = true
      members[#members + 1] = id
    elseif exp ~= 0 and exp <= now then
      held = held - redis.call('HDEL', key, f) -- expired: it is suppressed as such when it comes back
    elseif held_at <= allowed then
      members[#members + 1] = id
    end
  elseif string.sub(f, 1, 2) == 'd:' and old[v] then
    redis.call('HDEL', key, f)
  end
end
if not has_trigger and (texp == 0 or texp > now) then
  members[#members + 1] = trigger
end
if #members < 2 then
  held = held - redis.call('HDEL', key, 'h:' .. trigger)
  redis.call('HSET', key, 'held', held)
  return {}
end
table.sort(members)
local ids = table.concat(members, ' ')
local digest = 'digest-' .. string.sub(redis.sha1hex(ids), 1, 24)
for _, id in ipairs(members) do
  held = held - redis.call('HDEL', key, 'h:' .. id)
  redis.call('HSET', key, 'd:' .. id, digest)
end
local first = ids
if #members > most then first = table.concat(members, ' ', 1, most) end
redis.call('HSET', key, 'D:' .. digest, 'pending ' .. #members .. ' ' .. str(now), 'I:' .. digest, first, 'held', held)
redis.call('PEXPIRE', key, keep)
local out = {digest, #members}
for _, id in ipairs(members) do out[#out + 1] = id end
return out
