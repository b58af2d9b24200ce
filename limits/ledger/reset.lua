-- reset: forget the ledger record of a job that was not sent, before its
-- dead letter is replayed (the replay starts with no attempts counted); a
-- sent job's record is kept.
--
-- KEYS[1]  the job's ledger hash, {<prefix>j:<id>}
--
-- Reply: -1 when the job was sent (its record kept), else 0 (forgotten, or
-- there was none)
if redis.call('HGET', KEYS[1], 's') == '1' then
  return -1
end
redis.call('DEL', KEYS[1])
return 0
