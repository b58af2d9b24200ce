-- idem.lua: claim the job ids a request's client chose, within their tenant.
--
-- KEYS[2i-1] {<prefix>gwid:<tenant>}:<id>   string: the hash of the job that holds the id
-- KEYS[2i]   {<prefix>gwid:<tenant>}c:<id>  string: the token of the request that wrote
--            the record, while only that request holds the id and its publish may
--            still fail (unclaim.lua)
-- ARGV[1]    ttl, ms (gateway.idempotency_ttl; at most 30 days, its range)
-- ARGV[2]    the claim's ttl, ms: how long the request may still give the id back
-- ARGV[3]    this request's token
-- ARGV[3+i]  job i's hash (hex)
--
-- A missing record is written with job i's hash and the ttl, and its claim
-- with the token. Reply, per id: 0 new (this job holds the id now); 1 the
-- same job holds it (a retry: it is published again, and the stream's
-- duplicate window or the dispatcher's ledger makes the two one job); 2
-- another job holds it. A retry deletes the claim: two requests hold the
-- id now, and the first one's failure must not release it while the retry
-- may have stored the job. The same id found twice in one request (an
-- array naming it twice) leaves the request's own claim in place.
--
-- Prepended (idem.go): internal/luapre's num.lua (whole, ttl_ms): an
-- argument that is not a whole number of ms stops the script with an error.
local keep = ttl_ms(math.min(whole('idempotency_ttl', ARGV[1], 1, MAX_TTL_MS), 2592000000))
local hold = ttl_ms(whole('claim ttl', ARGV[2], 1, MAX_TTL_MS))
if #KEYS % 2 ~= 0 then
  error({err = 'ERR ' .. #KEYS .. ' keys: want a record and its claim for each id'})
end
whole('hashes', #ARGV - 3, #KEYS / 2, #KEYS / 2)
local token = ARGV[3]
local out = {}
for i = 1, #KEYS / 2 do
  local record, claim, hash = KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 + i]
  local v = redis.call('GET', record)
  if not v then
    redis.call('SET', record, hash, 'PX', keep)
    redis.call('SET', claim, token, 'PX', hold)
    out[i] = 0
  elseif v == hash then
    if redis.call('GET', claim) ~= token then -- (the same id twice in one request: its own claim stays)
      redis.call('DEL', claim)
    end
    out[i] = 1
  else
    out[i] = 2
  end
end
return out
