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
-- the window (PEXPIRE ... GT: Redis 7.0 or newer).
--
-- internal/luapre's num.lua (prepended) defines str and ttl.

-- The decisions of one run mostly share their instants (now, and the
-- rule's window): each bound is formatted once per run (string.format is
-- what a decision spends most on outside Redis's own commands; ttl is
-- memoized alike in num.lua).
local bounds = {}
local function bound(n)
  local v = bounds[n]
  if v == nil then
    v = str(n)
    bounds[n] = v
  end
  return v
end

local function decide(key, marker_key, limit, window, job, now, at, move)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', bound(now - window))

  -- The job is entered first (NX: an entry it already has is kept), so
  -- the common case, a new job, needs no ZSCORE: one already in the log
  -- is then allowed again where it stands, or moved.
  if redis.call('ZADD', key, 'NX', bound(at), job) == 0 then
    local had = tonumber(redis.call('ZSCORE', key, job))
    if not move or had == at then
      local remaining = limit - redis.call('ZCARD', key)
      if remaining < 0 then remaining = 0 end
      return 1, remaining, 0, had
    end
    redis.call('ZADD', key, bound(at), job)
  end

  -- The entries after at - window, the job's own included.
  -- Decided for now, they are every entry the trim above left: ZCARD,
  -- O(1), where ZCOUNT walks the log (peek.lua keeps this true of its
  -- dropped trim).
  local count
  if at == now then
    count = redis.call('ZCARD', key) - 1
  else
    count = redis.call('ZCOUNT', key, '(' .. bound(at - window), '+inf') - 1
  end
  if count < limit then
    -- The log's expiry follows its newest entry. Alone after at - window,
    -- the job is the newest (what lies before it expires sooner): set.
    -- Otherwise the log held entries before this decision, and every
    -- decision that leaves an entry sets an expiry, so it has one: GT
    -- moves it only when the job is the newest.
    if count == 0 then
      redis.call('PEXPIRE', key, ttl(at + window - now))
    else
      redis.call('PEXPIRE', key, ttl(at + window - now), 'GT')
    end
    return 1, limit - count - 1, 0, at
  end

  -- Denied: the job leaves the log; allowed again when the entry that
  -- brings the count below limit leaves the window.
  redis.call('ZREM', key, job)
  local entry = redis.call('ZRANGEBYSCORE', key, '(' .. bound(at - window), '+inf', 'WITHSCORES', 'LIMIT', count - limit, 1)
  return 0, 0, tonumber(entry[2]) + window - now, 0
end
