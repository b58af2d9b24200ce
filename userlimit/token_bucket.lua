-- token_bucket.lua: the token-bucket decision for one (channel, user), as GCRA;
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the bucket: string, the theoretical arrival time tat in µs
-- marker_key the job's marker: string, the µs instant it lapses (admission + window)
-- limit    the burst, and the tokens refilled per window (integer >= 1)
-- window   in µs (integer >= 1000)
-- job      job id (unused here: it is in the marker's key)
-- Returns  allowed 1|0, remaining, retry_after_us (0 when allowed)
--
-- One token every T = ceil(window / limit) µs; the bucket is full when
-- tat <= now. A job is allowed when max(tat, now) + T - now <= limit * T.
-- The bucket expires one second after it is full again.

local function str(n) return string.format('%.0f', n) end
-- floor(a / b), exact for integers below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end

local function decide(key, marker_key, limit, window, job, now)
  local T = idiv(window + limit - 1, limit)
  local burst = limit * T
  local tat = tonumber(redis.call('GET', key))
  if not tat or tat < now then tat = now end

  local marker = tonumber(redis.call('GET', marker_key))
  if marker and marker > now then
    local remaining = idiv(burst - (tat - now), T)
    if remaining < 0 then remaining = 0 end
    return 1, remaining, 0
  end

  local new = tat + T
  if new - now > burst then
    return 0, 0, new - now - burst
  end

  redis.call('SET', key, str(new), 'PX', ttl(new - now))
  redis.call('SET', marker_key, str(now + window), 'PX', ttl(window))
  return 1, idiv(burst - (new - now), T), 0
end
