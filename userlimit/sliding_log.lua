-- sliding_log.lua: the exact sliding-log decision for one (channel, user);
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the log: sorted set, member = job id, score = the instant (µs)
--          the job is admitted for (its send time; may lie ahead of now)
-- marker_key unused (the log holds the job ids)
-- limit    most jobs admitted in any window (integer >= 1)
-- window   in µs (integer >= 1000)
-- job      job id; an id already in the log is allowed again without
--          counting (moved when decided for another instant)
-- now, at  the server's time and the instant decided for (at >= now)
-- move     at was given: a job admitted at another instant is moved there
-- Returns  allowed 1|0, remaining, retry_after_us, the job's instant
--
-- A job admitted at t counts while now < t + window. A decision for at
-- counts every entry after at - window, those ahead of at included: then
-- no window holds more than limit entries, in whatever order the instants
-- are decided. The log expires one second after its newest entry leaves
-- the window.
--
-- internal/luapre's num.lua (prepended) defines str and ttl.

local function decide(key, marker_key, limit, window, job, now, at, move)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now - window))

  local had = redis.call('ZSCORE', key, job)
  if had then
    had = tonumber(had)
    if not move or had == at then
      local remaining = limit - redis.call('ZCARD', key)
      if remaining < 0 then remaining = 0 end
      return 1, remaining, 0, had
    end
    redis.call('ZREM', key, job)
  end

  local from = '(' .. str(at - window)
  local count = redis.call('ZCOUNT', key, from, '+inf')
  if count < limit then
    redis.call('ZADD', key, str(at), job)
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', key, ttl(tonumber(newest[2]) + window - now))
    return 1, limit - count - 1, 0, at
  end

  -- Denied: allowed again when the entry that brings the count below limit
  -- leaves the window.
  local entry = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', count - limit, 1)
  return 0, 0, tonumber(entry[2]) + window - now, 0
end
