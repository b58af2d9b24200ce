-- sent: record that jobs were sent, one or several in one script run (the
-- records of many jobs that share a Redis node and slot). "Sent" is not a
-- decision but a fact: s = 1, which every later claim reads first, the
-- message that was sent when it is known, and the lease ended (l = 0).
--
-- The record's expiry: a job is sent within the lease of its latest claim,
-- which kept the record dedup_ttl past the lease's end (ledger_claim.lua),
-- so the record already outlives the send by dedup_ttl and is left as it
-- is. A record the claim did not write (no lease end: gone meanwhile,
-- released, or written with no claim at all) is kept dedup_ttl from now:
-- HSET says so, since every field it writes is then new.
--
-- KEYS[i]     the ledger hash of job i, {<prefix>j:<id>}
-- ARGV[1]     record TTL (dedup_ttl), integer milliseconds
-- ARGV[2i]    the stream sequence of the message sent as job i (q), a
--             decimal integer from 1; '' records none
-- ARGV[2i+1]  a digest of that message's bytes (h), with the sequence
--
-- Reply: the number of jobs recorded
--
-- Every argument is checked before anything is written.
--
-- Prepended (ledger.go): internal/luapre's num.lua (whole, ttl_ms).
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
  local seq = ARGV[2 * i]
  local added, fields
  if seq ~= '' then
    added, fields = redis.call('HSET', key, 's', '1', 'q', seq, 'h', ARGV[2 * i + 1], 'l', '0'), 4
  else
    added, fields = redis.call('HSET', key, 's', '1', 'l', '0'), 2
  end
  if added == fields then
    redis.call('PEXPIRE', key, keep)
  end
end
return #KEYS
