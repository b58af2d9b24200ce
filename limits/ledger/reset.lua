-- reset: forget the ledger record of a job that was not sent, before its
-- dead letter is replayed (the replay starts with no attempts counted); a
-- sent job's record is kept.
--
-- KEYS[1]  the job's ledger record, {<prefix>j:<id>} (record.lua)
--
-- Reply: -1 when the job was sent (its record kept), else 0 (forgotten, or
-- there was none)
--
-- Prepended (ledger.go): internal/luapre's num.lua, record.lua and
-- update.lua (load).
local rec = load(KEYS[1])
if rec ~= nil and rec.s == '1' then
  return -1
end
redis.call('DEL', KEYS[1])
return 0
