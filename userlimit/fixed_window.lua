-- fixed_window.lua: the fixed-window decision for one (channel, user);
-- decide.lua (appended) runs it for each decision of a call.
--
-- key      the counters: hash {<k> = jobs admitted for instants in window k
--          = floor(t / window)}, one field per window from the current one
--          on (instants may lie ahead of now)
-- marker_key the job's marker: string '@' .. the instant (µs) its admission
--          stands at; it lapses one window after that instant
-- limit    most jobs admitted per window (integer >= 1)
-- window   in µs (integer >= 1000); windows are aligned to the Unix epoch
-- job      job id (unused here: it is in the marker's key)
-- now, at, move  see decide.lua
-- Returns  allowed 1|0, remaining, retry_after_us, the job's instant
--
-- marker.lua (prepended) defines admitted(), which reads the job's marker,
-- and internal/luapre's num.lua (prepended before it) str, idiv and ttl.
--
-- A job with an unlapsed marker is allowed again without counting; decided
-- for another instant (move) it is withdrawn from its window and decided
-- anew. Windows before the current one are dropped; the hash expires one
-- second after its last window ends, a marker one second after it lapses.
-- (The fields w and n of the one-window format before are read once and
-- turned into a field of their window.)

local function decide(key, marker_key, limit, window, job, now, at, move)
  local cur = idiv(now, window)
  local counts, last = {}, cur
  local all = redis.call('HGETALL', key)
  local lw, ln
  for i = 1, #all, 2 do
    local f, v = all[i], tonumber(all[i + 1])
    if f == 'w' then lw = v elseif f == 'n' then ln = v
    else
      local k = tonumber(f)
      if k < cur then redis.call('HDEL', key, f) else counts[k] = v; if k > last then last = k end end
    end
  end
  if lw then
    redis.call('HDEL', key, 'w', 'n')
    if lw >= cur and ln and ln > 0 then
      counts[lw] = (counts[lw] or 0) + ln
      redis.call('HSET', key, str(lw), str(counts[lw]))
      if lw > last then last = lw end
    end
  end

  local idx = idiv(at, window)
  local had = admitted(marker_key, window, now)
  if had then
    if not move or had == at then
      local remaining = limit - (counts[idx] or 0)
      if remaining < 0 then remaining = 0 end
      return 1, remaining, 0, had
    end
    local hidx = idiv(had, window)
    if (counts[hidx] or 0) > 0 then
      counts[hidx] = counts[hidx] - 1
      redis.call('HSET', key, str(hidx), str(counts[hidx]))
    end
    redis.call('DEL', marker_key)
  end

  local n = counts[idx] or 0
  if n < limit then
    redis.call('HSET', key, str(idx), str(n + 1))
    if idx > last then last = idx end
    redis.call('PEXPIRE', key, ttl((last + 1) * window - now))
    redis.call('SET', marker_key, '@' .. str(at), 'PX', ttl(at + window - now))
    return 1, limit - n - 1, 0, at
  end

  -- Denied: allowed from the start of the next window with room.
  local j = idx + 1
  while (counts[j] or 0) >= limit do j = j + 1 end
  return 0, 0, j * window - now, 0
end
