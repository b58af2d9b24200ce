-- sliding_window.lua: the sliding-window-counter decision for one (channel,
-- user); decide.lua (appended) runs it for each decision of a call.
--
-- key      the counters: hash {c<k> = jobs admitted for instants in fixed
--          window k = floor(t / window), e<k> = the earliest offset into
--          window k of any job admitted there}, from the window before the
--          current one on (instants may lie ahead of now)
-- marker_key the job's marker: string '@' .. the instant (µs) its admission
--          stands at; it lapses one window after that instant
-- limit    integer >= 1
-- window   in µs (integer >= 1000); fixed windows are aligned to the Unix epoch
-- job      job id (unused here: it is in the marker's key)
-- now, at, move  see decide.lua
-- Returns  allowed 1|0, remaining, retry_after_us, the job's instant
--
-- marker.lua (prepended) defines admitted(), which reads the job's marker,
-- and internal/luapre's num.lua (prepended before it) str, idiv and ttl.
--
-- With e = at - start of at's window, c its count and p the previous
-- window's, the estimate of the sliding window is c + p * (window - e) /
-- window; a job is allowed when the estimate with it is at most limit and,
-- when the next window already holds jobs (decided for later instants),
-- their estimates stay within limit too (taken at the earliest of their
-- offsets). The arithmetic, including its floating-point order, matches
-- the in-memory backend exactly. The hash expires one second after the
-- window following its last one ends. (The fields w, c and p of the
-- two-window format before are read once and turned into fields of their
-- windows.)

local function decide(key, marker_key, limit, window, job, now, at, move)
  local function weight(p, e) return p * (window - e) / window end
  local function allows(c, p, e) return c + 1 + weight(p, e) <= limit end
  local function remaining(c, p, e)
    local r = math.floor(limit - c - weight(p, e))
    if r < 0 then r = 0 end
    return r
  end

  local cur = idiv(now, window)
  local c, emin, last = {}, {}, cur
  local all = redis.call('HGETALL', key)
  local lw, lc, lp
  for i = 1, #all, 2 do
    local f, v = all[i], tonumber(all[i + 1])
    if f == 'w' then lw = v elseif f == 'c' then lc = v elseif f == 'p' then lp = v
    else
      local k = tonumber(string.sub(f, 2))
      if k < cur - 1 then redis.call('HDEL', key, f)
      elseif string.sub(f, 1, 1) == 'c' then c[k] = v; if k > last then last = k end
      else emin[k] = v end
    end
  end
  if lw then
    redis.call('HDEL', key, 'w', 'c', 'p')
    for k, n in pairs({[lw] = lc, [lw - 1] = lp}) do
      if k >= cur - 1 and n and n > 0 then
        c[k], emin[k] = (c[k] or 0) + n, 0
        redis.call('HSET', key, 'c' .. str(k), str(c[k]), 'e' .. str(k), '0')
        if k > last then last = k end
      end
    end
  end
  -- Adding one job to window j keeps the jobs of window j + 1 within limit.
  local function fits_next(j, cj)
    local n = c[j + 1] or 0
    if n == 0 then return true end
    return n + weight(cj + 1, emin[j + 1] or 0) <= limit
  end

  local idx = idiv(at, window)
  local e = at - idx * window
  local had = admitted(marker_key, window, now)
  if had then
    if not move or had == at then
      return 1, remaining(c[idx] or 0, c[idx - 1] or 0, e), 0, had
    end
    local hidx = idiv(had, window)
    if (c[hidx] or 0) > 0 then
      c[hidx] = c[hidx] - 1
      redis.call('HSET', key, 'c' .. str(hidx), str(c[hidx]))
    end
    redis.call('DEL', marker_key)
  end

  local n, p = c[idx] or 0, c[idx - 1] or 0
  if allows(n, p, e) and fits_next(idx, n) then
    n = n + 1
    local m = emin[idx]
    if not m or e < m then m = e end
    redis.call('HSET', key, 'c' .. str(idx), str(n), 'e' .. str(idx), str(m))
    if idx > last then last = idx end
    redis.call('PEXPIRE', key, ttl((last + 2) * window - now))
    redis.call('SET', marker_key, '@' .. str(at), 'PX', ttl(at + window - now))
    return 1, remaining(n, p, e), 0, at
  end

  -- Denied: the first instant a job would be allowed if nothing else were
  -- admitted. Window by window from at's: in one window the estimate only
  -- falls as the offset grows, so a binary search finds the first offset;
  -- two windows after the last one the state is empty.
  for j = idx, last + 2 do
    local cj, pj = c[j] or 0, c[j - 1] or 0
    local lo = 0
    if j == idx then lo = e end
    if fits_next(j, cj) and allows(cj, pj, window - 1) then
      if j > idx and allows(cj, pj, 0) then return 0, 0, j * window - now, 0 end
      local hi = window - 1
      while hi - lo > 1 do
        local mid = lo + math.floor((hi - lo) / 2)
        if allows(cj, pj, mid) then hi = mid else lo = mid end
      end
      return 0, 0, j * window + hi - now, 0
    end
  end
  return 0, 0, (last + 3) * window - now, 0
end
