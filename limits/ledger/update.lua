-- update.lua (prepended after record.lua to the scripts that change a
-- record in place: failed.lua, release.lua, reset.lua): the record read
-- as a table and written back whole. The hot paths, a claim and a sent
-- record, write theirs in one command without reading it first.

-- load is the record at key as a table, or nil when there is none.
local function load(key)
  local v = redis.pcall('GET', key)
  if wrongtype(v) then -- a hash of an earlier version
    convert(key)
    v = redis.call('GET', key)
  end
  if not v then
    return nil
  end
  return parse(v, key)
end

-- store writes rec at key, its expiry kept, or deletes the record when rec
-- has no field left (as a hash whose last field goes). It says whether a
-- record remains.
local function store(key, rec)
  local v = encode(rec)
  if v == '' then
    redis.call('DEL', key)
    return false
  end
  redis.call('SET', key, v, 'KEEPTTL')
  return true
end
