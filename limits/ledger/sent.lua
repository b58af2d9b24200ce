-- sent: record that jobs were sent, one or several in one script run (the
-- records of many jobs that share a Redis node and slot). "Sent" is not a
-- decision but a fact: s = 1, which every later claim reads first (the
-- lease fields left beside it mean nothing any more), the message that was
-- sent when it is known, and the record kept dedup_ttl more.
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
  if seq ~= '' then
    redis.call('HSET', key, 's', '1', 'q', seq, 'h', ARGV[2 * i + 1])
  else
    redis.call('HSET', key, 's', '1')
  end
  redis.call('PEXPIRE', key, keep)
end
return #KEYS
