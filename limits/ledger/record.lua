-- record.lua (prepended to every ledger script, after internal/luapre's
-- num.lua): a job's ledger record is one Redis string of entries, each a
-- field's one-letter name, its value's length in bytes, ':' and the value
-- ("o12:host-a/1234l16:1765110000000000"). A later entry of a field
-- overrides an earlier one. A string, unlike a hash, is written with its
-- expiry in one command: a new job's claim is one SET ... NX PX ... GET
-- where a hash took HMGET, HSET and PEXPIRE (callgrind: 13,000
-- instructions a claim against 26,000).
--
-- Fields: s = 1 once sent; a = transient provider failures so far;
-- o = lease owner; l = lease end (µs of the Redis clock; 0 once sent);
-- q, h = the stream sequence and digest of the message sent; e = the class
-- of the last transient failure; x, r = the outcome of a job that was not
-- sent and its reason; w, u = why the job was last put off and until when
-- (µs); n = how many times it was put off. An absent field and an empty
-- one are the same.
--
-- A record written by an earlier version is a hash of the same fields: the
-- first script that meets it rewrites it as a string, its expiry kept
-- (convert), and goes on.

-- lenstr is n as a decimal string, made once a run (a run's owners, lease
-- ends and digests mostly share their lengths: a number made a string
-- costs about 1,000 instructions).
local lenstrs = {}
local function lenstr(n)
  local s = lenstrs[n]
  if s == nil then
    s = string.format('%d', n)
    lenstrs[n] = s
  end
  return s
end

-- entry is one field's entry; v a string. (The hot paths write theirs in
-- one concatenation, which makes one string where entry makes two.)
local function entry(f, v)
  return f .. lenstr(#v) .. ':' .. v
end

-- encode is the record rec (field -> string or integer) as one string,
-- the empty fields left out.
local function encode(rec)
  local parts, k = {}, 0
  for f, v in pairs(rec) do
    if type(v) == 'number' then
      v = str(v)
    end
    if v ~= '' then
      k = k + 1
      parts[k] = entry(f, v)
    end
  end
  return table.concat(parts)
end

-- parse reads a record string into a table, field -> value; a string that
-- is not one stops the script with an error naming the key.
local function parse(s, key)
  local rec, i, n = {}, 1, #s
  while i <= n do
    local c = string.find(s, ':', i + 1, true)
    local digits = c and string.sub(s, i + 1, c - 1)
    local len = digits and string.find(digits, '^%d+$') and num(digits)
    if not len or c + len > n then
      error({err = 'ERR ledger record ' .. key .. ' is malformed at byte ' .. (i - 1)})
    end
    local v = string.sub(s, c + 1, c + len)
    if v == '' then v = nil end
    rec[string.sub(s, i, i)] = v
    i = c + len + 1
  end
  return rec
end

-- wrongtype says whether r, a redis.pcall reply, is a WRONGTYPE error (the
-- key holds a hash of an earlier version); any other error stops the
-- script with it (out of memory, a read-only replica), as redis.call would.
local function wrongtype(r)
  if type(r) ~= 'table' or r.err == nil then
    return false
  end
  if string.sub(r.err, 1, 9) == 'WRONGTYPE' then
    return true
  end
  error(r)
end

-- hash_record is the hash record of an earlier version at key as a table,
-- field -> value, its empty fields left out (as parse leaves them).
local function hash_record(key)
  local h = redis.call('HGETALL', key)
  local rec = {}
  for j = 1, #h, 2 do
    if h[j + 1] ~= '' then
      rec[h[j]] = h[j + 1]
    end
  end
  return rec
end

-- convert rewrites the hash record of an earlier version at key as a
-- string, its expiry kept.
local function convert(key)
  local v = encode(hash_record(key))
  local left = redis.call('PTTL', key)
  redis.call('DEL', key)
  if v == '' then
    return
  end
  if left >= 0 then -- 0: due within the run, which Redis still sees (ttl_ms makes it 1 ms)
    redis.call('SET', key, v, 'PX', ttl_ms(left))
  else
    redis.call('SET', key, v)
  end
end
