-- keep.lua (prepended to failed.lua and release.lua after num.lua and
-- record.lua): the record's expiry after a change that may leave a lease in
-- place.
--
-- keep_record(key, rec, keep) makes the record live keep ms more (dedup_ttl,
-- an integer), except that while it holds a lease field (l: a live lease, or
-- the 0 of a sent record) it never shortens the expiry: a claim kept the
-- record dedup_ttl past its lease's end, and the job sent under that lease
-- has its sent record leave the expiry there (sent.lua), so the
-- record outlives the send by dedup_ttl only if nothing shortens it
-- meanwhile (a wait noted under the lease, another owner's failure or
-- deferral). A record with no expiry at all gets keep.
local function keep_record(key, rec, keep)
  if rec.l ~= nil then
    local left = redis.call('PTTL', key) -- -1: no expiry
    if left >= 0 and left >= keep then
      return
    end
  end
  redis.call('PEXPIRE', key, ttl_ms(keep))
end
