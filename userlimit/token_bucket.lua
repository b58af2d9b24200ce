-- token_bucket.lua: the token-bucket decision for one (channel, user), as
-- GCRA on the instants the jobs are admitted for, kept exact whatever the
-- order those instants are decided in; decide.lua (appended) runs it for
-- each decision of a call.
--
-- key      the bucket: string '<tat>:<g>:<newest>:<T>' in µs: tat, GCRA's
--          theoretical arrival time over the admissions folded out of the
--          log (those whose window has passed, folded in instant order);
--          g, GCRA's over every admission, folded and in the log, in
--          instant order; newest, the latest instant in the log; T, the
--          token interval g was worked out with. The format before,
--          '<tat>' alone, is read as tat, g and newest being worked out
--          from the log (as they are when the rule's T changed)
-- log_key  the log: sorted set, member = job id, score = the instant (µs)
--          the job is admitted for (its send time; may lie ahead of now);
--          an admission stays in it for one window after its instant
-- limit    the burst, and the tokens refilled per window (integer >= 1)
-- window   in µs (integer >= 1000)
-- job      job id; an id in the log is allowed again without taking a
--          token (moved when decided for another instant)
-- now, at, move  see decide.lua
-- Returns  allowed 1|0, remaining, retry_after_us, the job's instant
--
-- One token every T = ceil(window / limit) µs, burst = limit * T. GCRA over
-- instants in time order admits a set exactly when no stretch of instants
-- [a, b] holds more than limit + (b - a) / T of them, i.e. when
-- c * T <= burst + (b - a) for the c admissions in every such stretch. A
-- job is allowed for x when adding it keeps that true: with
--
--   L = the most, over the stretches [a, x] ending at x, of c * T - (x - a)
--       (c: admissions in it; 0 for the empty stretch), the folded ones
--       counting as tat - x + T * (admissions in the log up to x)
--   R = the same over the stretches (x, b] starting after x
--
-- the job is allowed when L + R + T <= burst. Since the whole set is kept
-- (the log, and tat for what left it in time order), the decision does not
-- depend on the order the instants were decided in: a job moved to its
-- send slot gives its token back exactly (it leaves the log) and is
-- decided anew, however many jobs were admitted since.
--
-- For x at or after every admission (a job decided for now, or moved to a
-- slot behind all the others) L is max(g - x, 0) and R is 0: GCRA itself,
-- O(1) (a ZSCORE and a ZADD, O(log n)). Otherwise (x before the newest
-- admission, or a move, which recomputes g) the decision reads the log:
-- O(admissions in the last window), at most 2 * limit (so limit is capped
-- at 1000), unless a count of the log shows there is no room for x. Both
-- keys expire
-- one second after neither matters (the newest entry left the window, and
-- g has passed).
--
-- internal/luapre's num.lua (prepended) defines str, idiv and ttl.

-- pressure returns L and R for an instant x over the log entries ts (in
-- time order) and the folded tat (0: none).
local function pressure(ts, tat, x, T)
  local L, c, k = 0, 0, #ts
  while k >= 1 and ts[k] > x do k = k - 1 end
  local right = k + 1
  for i = k, 1, -1 do
    c = c + 1
    local v = c * T - (x - ts[i])
    if v > L then L = v end
  end
  if tat > 0 then
    local v = tat - x + c * T
    if v > L then L = v end
  end
  local R = 0
  c = 0
  for i = right, #ts do
    c = c + 1
    local v = c * T - (ts[i] - x)
    if v > R then R = v end
  end
  return L, R
end

-- load reads the bucket: tat (0: none), g and newest (nil: unknown, or
-- worked out with another token interval than T).
local function load(key, T)
  local v = redis.call('GET', key)
  if not v then return 0, 0, 0 end
  local a, b, c, d = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  if a and tonumber(d) == T then return tonumber(a), tonumber(b), tonumber(c) end
  if a then return tonumber(a), nil, nil end
  return tonumber(v) or 0, nil, nil
end

local function decide(key, log_key, limit, window, job, now, at, move)
  local T = idiv(window + limit - 1, limit)
  local burst = limit * T
  local cut = now - window

  -- Fold what left the window into tat, in time order (g stays: the same
  -- admissions in the same order).
  local tat, g, newest = load(key, T)
  local gone = redis.call('ZRANGEBYSCORE', log_key, '-inf', str(cut), 'WITHSCORES')
  for i = 2, #gone, 2 do
    local s = tonumber(gone[i])
    if s > tat then tat = s end
    tat = tat + T
  end
  local changed = #gone > 0
  if changed then redis.call('ZREMRANGEBYSCORE', log_key, '-inf', str(cut)) end

  -- entries reads the log's instants in time order, without the job's.
  local ts
  local function entries()
    if not ts then
      ts = {}
      local live = redis.call('ZRANGEBYSCORE', log_key, '(' .. str(cut), '+inf', 'WITHSCORES')
      for i = 1, #live, 2 do
        if live[i] ~= job then ts[#ts + 1] = tonumber(live[i + 1]) end
      end
    end
    return ts
  end
  -- gcra sets g and newest from tat and the instants xs (in time order).
  local function gcra(xs)
    g, newest = tat, 0
    for i = 1, #xs do
      if xs[i] > g then g = xs[i] end
      g = g + T
      newest = xs[i]
    end
  end
  local function save()
    local until_us = g
    if newest > 0 and newest + window > until_us then until_us = newest + window end
    if until_us <= now then
      redis.call('DEL', key)
      return
    end
    local px = ttl(until_us - now)
    redis.call('SET', key, str(tat) .. ':' .. str(g) .. ':' .. str(newest) .. ':' .. str(T), 'PX', px)
    if newest > 0 then redis.call('PEXPIRE', log_key, px) end
  end
  -- pressureAt is L and R for x: O(1) at or after every admission. Before
  -- the newest, when the log's admissions leave no room for x in the
  -- stretch from the first of them to the newest (n + 1 jobs in it), or
  -- those after x alone leave none, it answers with a lower bound (enough
  -- to deny) from a ZCARD, a ZRANGE and a ZCOUNT; otherwise it reads the
  -- log.
  local function pressureAt(x, xs)
    if x >= newest then
      local L = g - x
      if L < 0 then L = 0 end
      return L, 0
    end
    if not xs and not ts then
      local n = redis.call('ZCARD', log_key)
      local first = redis.call('ZRANGE', log_key, 0, 0, 'WITHSCORES')
      if n > 0 and first[2] then
        local lo = math.min(tonumber(first[2]), x)
        local span = n * T - (newest - lo)
        if span + T > burst then return span, 0 end
      end
      local R = redis.call('ZCOUNT', log_key, '(' .. str(x), '+inf') * T - (newest - x)
      if R + T > burst then return 0, R end
    end
    return pressure(xs or entries(), tat, x, T)
  end

  local had = redis.call('ZSCORE', log_key, job)
  if had then had = tonumber(had) end
  if g == nil then
    -- The format before, or another T: work g out from the log, the job
    -- included.
    local xs = {}
    for i = 1, #entries() do xs[i] = ts[i] end
    if had then
      xs[#xs + 1] = had
      table.sort(xs)
    end
    gcra(xs)
    changed = true
  end

  if had then
    if not move or had == at then
      -- Admitted already: allowed where it stands, without a token.
      local L, R
      if now >= newest then
        L, R = pressureAt(now)
      else
        local xs = {}
        for i = 1, #entries() do xs[i] = ts[i] end
        xs[#xs + 1] = had
        table.sort(xs)
        L, R = pressure(xs, tat, now, T)
      end
      local remaining = idiv(burst - L - R, T)
      if remaining < 0 then remaining = 0 end
      if changed then save() end
      return 1, remaining, 0, had
    end
    redis.call('ZREM', log_key, job) -- moved: its token goes back
    gcra(entries())
    changed = true
  end

  local L, R = pressureAt(at)
  if L + R + T > burst then
    if changed then save() end
    -- Allowed again at the earliest instant y at or after every admission
    -- with g + T - y <= burst; exact when x was after every admission.
    local y = g + T - burst
    if newest > y then y = newest end
    local retry = y - now
    if retry < 1 then retry = 1 end
    return 0, 0, retry, 0
  end
  redis.call('ZADD', log_key, str(at), job)
  if at >= newest then
    if at > g then g = at end
    g, newest = g + T, at
  else
    local xs = {}
    for i = 1, #entries() do xs[i] = ts[i] end
    xs[#xs + 1] = at
    table.sort(xs)
    gcra(xs)
  end
  save()
  local remaining = idiv(burst - L - T - R, T)
  if remaining < 0 then remaining = 0 end
  return 1, remaining, 0, at
end
