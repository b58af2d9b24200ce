-- settle: record what became of a failed or abandoned send, and give up
-- the lease. (A sent job needs no script: RedisLedger.SentCmd sets s = 1.)
--
-- KEYS[1]  the job's ledger hash, {<prefix>j:<id>}
-- ARGV[1]  owner token of the caller
-- ARGV[2]  what happened: "failed" | "release" | "end" | "reset"
-- ARGV[3]  record TTL (dedup_ttl), integer milliseconds
-- ARGV[4]  failed: the failure's class ("5xx", "error"; may be absent)
--          end: "dead" | "suppressed"
-- ARGV[5]  end only: the reason, a word of the dispatcher's own list
--          (Notifier-Reason: user_limit, rejected...), never a provider's
--          text
--
-- Fields beside claim's: x = the outcome of a job that was not sent (dead |
--         suppressed), r = its reason, e = the class of the last transient
--         failure.
--
-- failed:  a = a + 1 (one transient provider failure), e = its class, the
--          caller's lease cleared
-- release: the caller's lease cleared; nothing counted
-- end:     release, and the job's end noted in x and r; nothing counted. A
--          sent job's record is kept as it is.
-- reset:   forget the record of a job that was not sent (a dead letter being
--          replayed starts with no attempts); a sent job is kept
--
-- Reply: attempts after the operation (integer); for reset, -1 when the job
-- was sent (and is kept), else 0
local key = KEYS[1]
local op = ARGV[2]
if op == 'failed' then
  redis.call('HINCRBY', key, 'a', 1)
  if ARGV[4] and ARGV[4] ~= '' then
    redis.call('HSET', key, 'e', ARGV[4])
  end
  if redis.call('HGET', key, 'o') == ARGV[1] then
    redis.call('HDEL', key, 'o', 'l')
  end
elseif op == 'release' then
  if redis.call('HGET', key, 'o') == ARGV[1] then
    redis.call('HDEL', key, 'o', 'l')
  end
elseif op == 'end' then
  if redis.call('HGET', key, 'o') == ARGV[1] then
    redis.call('HDEL', key, 'o', 'l')
  end
  if redis.call('HGET', key, 's') ~= '1' then
    redis.call('HSET', key, 'x', ARGV[4], 'r', ARGV[5])
  end
elseif op == 'reset' then
  if redis.call('HGET', key, 's') == '1' then
    return -1
  end
  redis.call('DEL', key)
  return 0
else
  return redis.error_reply('settle: unknown operation ' .. tostring(op))
end
redis.call('PEXPIRE', key, ARGV[3])
return tonumber(redis.call('HGET', key, 'a')) or 0
