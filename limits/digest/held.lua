-- held.lua (digest): prepended to hold.lua and take.lua.
--
-- held_count(key) is how many jobs the user's hash holds (its h:<id>
-- fields): its held field. A hash written before that count was kept has
-- its h: fields counted once (HKEYS), and the count written; no hash holds
-- none.
local function held_count(key)
  local n = redis.call('HGET', key, 'held')
  if n then return tonumber(n) end
  if redis.call('EXISTS', key) == 0 then return 0 end
  n = 0
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'h:' then n = n + 1 end
  end
  redis.call('HSET', key, 'held', n)
  return n
end
