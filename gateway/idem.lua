-- idem.lua: claim the job ids a request's client chose, within their tenant.
--
-- KEYS[i]   {<prefix>gwid:<tenant>}:<id>  string: the hash of the job that holds the id
-- ARGV[1]   ttl, ms (gateway.idempotency_ttl; at most 30 days, its range)
-- ARGV[1+i] job i's hash (hex)
--
-- A missing record is written with job i's hash and the ttl. Reply, per key:
-- 0 new (this job holds the id now); 1 the same job holds it (a retry: it is
-- published again, and the stream's duplicate window or the dispatcher's
-- ledger makes the two one job); 2 another job holds it.
--
-- Prepended (idem.go): internal/luapre's num.lua (whole, ttl_ms): an
-- argument that is not a whole number of ms stops the script with an error.
local keep = ttl_ms(math.min(whole('idempotency_ttl', ARGV[1], 1, MAX_TTL_MS), 2592000000))
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if not v then
    redis.call('SET', KEYS[i], ARGV[1 + i], 'PX', keep)
    out[i] = 0
  elseif v == ARGV[1 + i] then
    out[i] = 1
  else
    out[i] = 2
  end
end
return out
