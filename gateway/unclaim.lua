-- unclaim.lua: release the job ids a request claimed (idem.lua) for jobs
-- that were never sent: NATS refused each before it left (disconnected,
-- closed, no stream), so nothing was stored and the id names no job.
--
-- KEYS[i]   {<prefix>gwid:<tenant>}:<id>  string: the hash of the job that holds the id
-- ARGV[i]   the hash this request's job i wrote there (hex)
--
-- Compare and delete: a record is deleted only while it still holds
-- ARGV[i]; a record that names another job by now (the id expired and was
-- claimed again meanwhile) is kept. Reply: how many records were deleted.
--
-- Prepended (idem.go): internal/luapre's num.lua, as for idem.lua (whole):
-- a call whose keys and hashes do not pair up stops with an error.
whole('hashes', #ARGV, #KEYS, #KEYS)
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
