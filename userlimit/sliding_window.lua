-- sliding_window.lua: the sliding-window-counter decision for one (channel,
-- user); decide.lua (appended) runs it for each decision of a call.
--
-- key      the counters: hash {w = current window index floor(now / window),
--          c = jobs admitted in window w, p = jobs admitted in window w - 1}
-- marker_key the job's marker: string, the µs instant it lapses (admission + window)
-- limit    integer >= 1
-- window   in µs (integer >= 1000); fixed windows are aligned to the Unix epoch
-- job      job id (unused here: it is in the marker's key)
-- Returns  allowed 1|0, remaining, retry_after_us (0 when allowed)
--
-- With e = now - start of the current window, the estimate of the sliding
-- window is c + p * (window - e) / window; a job is allowed when the estimate
-- with it is at most limit. The arithmetic, including its floating-point
-- order, matches the in-memory backend exactly. The counters expire one
-- second after the window following the current one ends.

local function str(n) return string.format('%.0f', n) end
-- floor(a / b), exact for integers below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end

local function decide(key, marker_key, limit, window, job, now)
  local function allows(c, p, e) return c + 1 + p * (window - e) / window <= limit end
  local function remaining(c, p, e)
    local r = math.floor(limit - c - p * (window - e) / window)
    if r < 0 then r = 0 end
    return r
  end

  local idx = idiv(now, window)
  local e = now - idx * window
  local state = redis.call('HMGET', key, 'w', 'c', 'p')
  local w = tonumber(state[1])
  local c, p = 0, 0
  if w == idx then
    c, p = tonumber(state[2]), tonumber(state[3])
  elseif w == idx - 1 then
    p = tonumber(state[2])
  end

  local marker = tonumber(redis.call('GET', marker_key))
  if marker and marker > now then
    return 1, remaining(c, p, e), 0
  end

  if allows(c, p, e) then
    c = c + 1
    redis.call('HSET', key, 'w', str(idx), 'c', str(c), 'p', str(p))
    redis.call('PEXPIRE', key, ttl((idx + 2) * window - now))
    redis.call('SET', marker_key, str(now + window), 'PX', ttl(window))
    return 1, remaining(c, p, e), 0
  end

  -- Denied: binary search for the first instant a job would be allowed. The
  -- estimate never rises while nothing is admitted, and two windows on the
  -- state is empty.
  local function allowed_at(d)
    local t = now + d
    local i = idiv(t, window)
    local et = t - i * window
    if i == idx then return allows(c, p, et) end
    if i == idx + 1 then return allows(0, c, et) end
    return true
  end
  local lo, hi = 0, (idx + 2) * window - now
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if allowed_at(mid) then hi = mid else lo = mid end
  end
  return 0, 0, hi
end
