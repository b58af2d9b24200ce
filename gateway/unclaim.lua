-- unclaim.lua: release the job ids a request claimed (idem.lua) for jobs
-- that were never sent: NATS refused each before it left (disconnected,
-- closed, no stream), so nothing was stored and the id names no job.
--
-- KEYS[2i-1] {<prefix>gwid:<tenant>}:<id>   string: the hash of the job that holds the id
-- KEYS[2i]   {<prefix>gwid:<tenant>}c:<id>  string: the token of the request that claimed it
-- ARGV[1]    this request's token
-- ARGV[1+i]  the hash this request's job i wrote there (hex)
--
-- Compare and delete: a record is deleted only while its claim still holds
-- this request's token and the record its hash. A record whose claim is gone
-- is kept: a retry of the same job found it meanwhile (and may have stored
-- the job: the id names it), or the claim outlived its ttl; so is one that
-- names another job by now (the id expired and was claimed again). Reply:
-- how many records were deleted.
--
-- Prepended (idem.go): internal/luapre's num.lua, as for idem.lua (whole):
-- a call whose keys and hashes do not pair up stops with an error.
if #KEYS % 2 ~= 0 then
  error({err = 'ERR ' .. #KEYS .. ' keys: want a record and its claim for each id'})
end
whole('hashes', #ARGV - 1, #KEYS / 2, #KEYS / 2)
local token = ARGV[1]
local n = 0
for i = 1, #KEYS / 2 do
  local record, claim = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('GET', claim) == token and redis.call('GET', record) == ARGV[1 + i] then
    redis.call('DEL', record, claim)
    n = n + 1
  end
end
return n
