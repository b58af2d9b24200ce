-- token_bucket.lua: the token-bucket decision for one (channel, user), as GCRA;
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the bucket: string, the theoretical arrival time tat in µs
-- marker_key the job's marker: string '@<at>:<before>:<after>': the instant
--          (µs) its admission stands at, and tat just before and just after
--          it (before 0: no bucket); it lapses one window after that instant
-- limit    the burst, and the tokens refilled per window (integer >= 1)
-- window   in µs (integer >= 1000)
-- job      job id (unused here: it is in the marker's key)
-- now, at, move  see decide.lua
-- Returns  allowed 1|0, remaining, retry_after_us, the job's instant
--
-- One token every T = ceil(window / limit) µs; the bucket is full when
-- tat <= now. A job is allowed for at when max(tat, at) + T - at <= limit * T.
-- That bounds the jobs admitted for any interval of instants, in whatever
-- order they are decided, by limit + its length / T. A moved job gives its
-- token back exactly when nothing has been admitted since (tat is still
-- what it left); otherwise it keeps it and takes a new one (never more
-- than the bound, at worst one token short until the bucket refills). The
-- bucket expires one second after it is full again.

local function str(n) return string.format('%.0f', n) end
-- floor(a / b), exact for integers below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ttl(us) return str(math.ceil(us / 1000) + 1000) end

local function decide(key, marker_key, limit, window, job, now, at, move)
  local T = idiv(window + limit - 1, limit)
  local burst = limit * T
  local raw = tonumber(redis.call('GET', key))
  local tat = raw
  if not tat or tat < now then tat = now end

  local m = redis.call('GET', marker_key)
  if m then
    local had, before, after
    if string.sub(m, 1, 1) == '@' then
      local a, b, c = string.match(m, '^@(%d+):(%d+):(%d+)$')
      had, before, after = tonumber(a), tonumber(b), tonumber(c)
    else
      had = tonumber(m) - window -- the format before: when the marker lapses
    end
    if had and had + window > now then
      if not move or had == at then
        local remaining = idiv(burst - (tat - now), T)
        if remaining < 0 then remaining = 0 end
        return 1, remaining, 0, had
      end
      if after and raw == after then
        -- Nothing admitted since: give the token back.
        if before > now then
          redis.call('SET', key, str(before), 'PX', ttl(before - now))
          raw, tat = before, before
        else
          redis.call('DEL', key)
          raw, tat = nil, now
        end
      end
      redis.call('DEL', marker_key)
    end
  end

  local base = tat
  if at > base then base = at end
  local new = base + T
  if new - at > burst then
    return 0, 0, new - burst - now, 0
  end
  redis.call('SET', key, str(new), 'PX', ttl(new - now))
  redis.call('SET', marker_key, '@' .. str(at) .. ':' .. str(raw or 0) .. ':' .. str(new), 'PX', ttl(at + window - now))
  return 1, idiv(burst - (new - at), T), 0, at
end
