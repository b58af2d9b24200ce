-- sent: record that jobs were sent, one or several in one script run (the
-- records of many jobs that share a Redis node and slot). "Sent" is not a
-- decision but a fact: s = 1, which every later claim reads first, the
-- message that was sent when it is known, and the lease ended (l = 0, no
-- owner).
--
-- One APPEND a job: the sent entries go after the record's (record.lua:
-- a later entry overrides an earlier one), the owner cleared, whatever else
-- the record holds (attempts, a failure's class, notes) kept, and nothing
-- read back. Growing only by a send recorded, the record stays small.
--
-- The record's expiry: never less than dedup_ttl from the send. A job is
-- sent within the lease of its latest claim, which kept the record
-- dedup_ttl past the lease's end (claim.lua), so its expiry is already
-- later and stays (PEXPIRE ... GT); a record the claim did not write
-- (gone meanwhile, released, or written with no claim at all) gets
-- dedup_ttl from now.
--
-- KEYS[i]     the ledger record of job i, {<prefix>j:<id>} (record.lua)
-- ARGV[1]     record TTL (dedup_ttl), integer milliseconds
-- ARGV[2i]    the stream sequence of the message sent as job i (q), a
--             decimal integer from 1; '' records none
-- ARGV[2i+1]  a digest of that message's bytes (h), with the sequence
--
-- Reply: the number of jobs recorded
--
-- Every argument is checked before anything is written.
--
-- Prepended (ledger.go): internal/luapre's num.lua (whole, ttl_ms) and
-- record.lua (lenstr, wrongtype, convert).
local keep = ttl_ms(whole('dedup_ttl', ARGV[1], 1, MAX_TTL_MS))
if #ARGV ~= 1 + 2 * #KEYS then
  error({err = 'ERR wrong number of arguments: ' .. #ARGV .. ' for ' .. #KEYS .. ' records (want ' .. (1 + 2 * #KEYS) .. ')'})
end
for i = 1, #KEYS do
  local seq = ARGV[2 * i]
  if seq ~= '' and not (string.match(seq, '^[1-9]%d*$') and #seq <= 20) then
    error({err = 'ERR argument sequence out of range: ' .. seq .. ' (want a decimal integer from 1, or nothing)'})
  end
end
for i, key in ipairs(KEYS) do
  local seq, sum = ARGV[2 * i], ARGV[2 * i + 1]
  local sent
  if seq ~= '' then
    sent = 's1:1q' .. lenstr(#seq) .. ':' .. seq .. 'h' .. lenstr(#sum) .. ':' .. sum .. 'l1:0o0:'
  else
    sent = 's1:1l1:0o0:'
  end
  local n = redis.pcall('APPEND', key, sent)
  if type(n) == 'table' and wrongtype(n) then -- a hash of an earlier version (no call for the usual integer)
    convert(key)
    n = redis.call('APPEND', key, sent)
  end
  if n == #sent then
    redis.call('PEXPIRE', key, keep) -- no record before: none had an expiry
  else
    redis.call('PEXPIRE', key, keep, 'GT')
  end
end
return #KEYS
