-- fixed_window.lua: the fixed-window decision for one (channel, user);
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the counter: hash {w = window index floor(now / window), n = jobs admitted in it}
-- marker_key the job's marker: string, the µs instant it lapses (admission + window)
-- limit    most jobs admitted per window (integer >= 1)
-- window   in µs (integer >= 1000); windows are aligned to the Unix epoch
-- job      job id (unused here: it is in the marker's key)
-- Returns  allowed 1|0, remaining, retry_after_us (0 when allowed)
--
-- A job whose marker has not lapsed is allowed again without counting. The
-- counter expires one second after its window ends, the marker one second
-- after it lapses.

local function str(n) return string.format('%.0f', n) end
-- floor(a / b), exact for integers below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end

local function decide(key, marker_key, limit, window, job, now)
  local idx = idiv(now, window)
  local wend = (idx + 1) * window
  local state = redis.call('HMGET', key, 'w', 'n')
  local n = 0
  if tonumber(state[1]) == idx then n = tonumber(state[2]) end

  local marker = tonumber(redis.call('GET', marker_key))
  if marker and marker > now then
    local remaining = limit - n
    if remaining < 0 then remaining = 0 end
    return 1, remaining, 0
  end

  if n >= limit then
    return 0, 0, wend - now
  end

  if n > 0 then
    redis.call('HINCRBY', key, 'n', 1)
  else
    redis.call('HSET', key, 'w', str(idx), 'n', 1)
  end
  redis.call('PEXPIRE', key, ttl(wend - now))
  redis.call('SET', marker_key, str(now + window), 'PX', ttl(window))
  return 1, limit - n - 1, 0
end
