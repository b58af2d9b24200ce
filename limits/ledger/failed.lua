-- failed: count one transient provider failure of a job, note its class,
-- and give up the caller's lease.
--
-- KEYS[1]  the job's ledger record, {<prefix>j:<id>} (record.lua)
-- ARGV[1]  owner token of the caller
-- ARGV[2]  record TTL (dedup_ttl), integer milliseconds
-- ARGV[3]  the failure's class ("5xx", "error"; '' or absent: none)
--
-- Fields beside claim's (claim.lua): e = the class of the last
-- transient failure.
--
-- a = a + 1, e = the class when there is one, the lease (o, l) cleared when
-- the caller holds it; the record then lives dedup_ttl more (or longer
-- while another lease holds it: keep.lua).
--
-- Reply: attempts after this failure (integer)
--
-- Prepended (ledger.go): internal/luapre's num.lua (whole, ttl_ms, str),
-- record.lua, update.lua (load, store) and keep.lua (keep_record).
local keep = whole('dedup_ttl', ARGV[2], 1, MAX_TTL_MS)
local key = KEYS[1]
local rec = load(key) or {}
local attempts = (tonumber(rec.a) or 0) + 1
rec.a = attempts
if ARGV[3] and ARGV[3] ~= '' then
  rec.e = ARGV[3]
end
if rec.o == ARGV[1] then
  rec.o, rec.l = nil, nil
end
store(key, rec)
keep_record(key, rec, keep)
return attempts
