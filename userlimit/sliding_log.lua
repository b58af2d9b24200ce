-- sliding_log.lua: the exact sliding-log decision for one (channel, user);
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the log: sorted set, member = job id, score = admission time (µs)
-- marker_key unused (the log holds the job ids)
-- limit    most jobs admitted in any window (integer >= 1)
-- window   in µs (integer >= 1000)
-- job      job id; an id already in the log is allowed again without counting
-- Returns  allowed 1|0, remaining, retry_after_us (0 when allowed)
--
-- A job admitted at t counts while now < t + window. The log expires one
-- second after its newest entry leaves the window.

-- Integers travel to Redis as decimal strings; Lua's own conversion may use
-- an exponent and drop digits.
local function str(n) return string.format('%.0f', n) end

local function decide(key, marker_key, limit, window, job, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now - window))
  local count = redis.call('ZCARD', key)

  if redis.call('ZSCORE', key, job) then
    local remaining = limit - count
    if remaining < 0 then remaining = 0 end
    return 1, remaining, 0
  end

  if count < limit then
    redis.call('ZADD', key, str(now), job)
    redis.call('PEXPIRE', key, str(math.ceil(window / 1000) + 1000))
    return 1, limit - count - 1, 0
  end

  -- Denied: allowed again when the entry that brings the count below limit
  -- leaves the window.
  local entry = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
  return 0, 0, tonumber(entry[2]) + window - now
end
