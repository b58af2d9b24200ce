-- claim: take the send lease of one job, or of several jobs in one script
-- run (the claims of many jobs that share a Redis node and slot), or say
-- why not.
--
-- KEYS[i]     the ledger record of job i, {<prefix>j:<id>} (record.lua)
-- ARGV[1]     record TTL (dedup_ttl), integer milliseconds
-- ARGV[2]     now, integer microseconds (tests only; '' reads TIME)
-- ARGV[1+2i]  owner token of the caller of job i (unique per delivery attempt)
-- ARGV[2+2i]  lease length of job i, integer milliseconds
--
-- Fields (record.lua): s = 1 once sent; a = transient provider failures
--         so far; o = lease owner; l = lease end (µs of the Redis clock).
--
-- A claim keeps the record dedup_ttl + lease from now. A new job's claim
-- (no record) is one SET ... NX PX ... GET; a record that exists is read by
-- that same command and rewritten only when the claim is granted.
--
-- Reply: three integers per job, in KEYS' order: status, attempts, busy_ms
--   status 0 = claimed by the caller (a new lease, or the caller's own lease extended)
--   status 1 = already sent: the caller must not send
--   status 2 = another owner holds an unexpired lease; busy_ms until it ends
--
-- Prepended (ledger.go): internal/luapre's now.lua (now_us) and num.lua
-- (whole, ttl_ms, str), and record.lua (lenstr, entry, parse, encode,
-- wrongtype, hash_record): every
-- argument is checked before anything is written.
local now = now_us(ARGV[2])
local keep = whole('dedup_ttl', ARGV[1], 1, MAX_TTL_MS)
-- The lease ends as strings, made once per lease length (the claims of
-- one run mostly share theirs; formatting is the costly part, and ttl_ms
-- is memoized alike).
local leases, ends, lease_entries = {}, {}, {}
for i = 1, #KEYS do
  local l = whole('lease', ARGV[2 + 2 * i], 1, MAX_TTL_MS)
  leases[i] = l
  if ends[l] == nil then
    ends[l] = str(now + l * 1000)
    lease_entries[l] = entry('l', ends[l])
  end
end
local out = {}
for i, key in ipairs(KEYS) do
  local me = ARGV[1 + 2 * i]
  local lease = leases[i]
  local px = ttl_ms(keep + lease)
  local fresh = 'o' .. lenstr(#me) .. ':' .. me .. lease_entries[lease]
  local old = redis.pcall('SET', key, fresh, 'NX', 'PX', px, 'GET')
  local rec
  if type(old) == 'table' and wrongtype(old) then -- (the type test first: no call for the usual reply)
    -- A hash of an earlier version, read as it is. It becomes a string
    -- only when this claim is granted (SET replaces it): a sent job's
    -- hash, or one whose lease another owner holds, is left for that
    -- owner, a process of the earlier build, to write its sent record to.
    rec = hash_record(key)
  elseif old then
    rec = parse(old, key)
  end
  local n = #out
  if rec == nil then
    -- No record: the SET wrote the lease, kept dedup_ttl past its end
    -- (the job is sent within its lease, so the record outlives the send
    -- by dedup_ttl: sent.lua need not move the expiry).
    out[n + 1], out[n + 2], out[n + 3] = 0, 0, 0
  else
    local attempts = tonumber(rec.a) or 0
    local lease_end = tonumber(rec.l) or 0
    if rec.s == '1' then
      out[n + 1], out[n + 2], out[n + 3] = 1, attempts, 0
    elseif rec.o and rec.o ~= me and lease_end > now then
      out[n + 1], out[n + 2], out[n + 3] = 2, attempts, math.ceil((lease_end - now) / 1000)
    else
      rec.o, rec.l = me, ends[lease]
      redis.call('SET', key, encode(rec), 'PX', px)
      out[n + 1], out[n + 2], out[n + 3] = 0, attempts, 0
    end
  end
end
return out
