-- marker.lua: prepended to the scripts of the algorithms that keep a
-- marker per admitted job (fixed_window, sliding_window): admitted() reads
-- one. A marker is the string '@' .. the instant (µs) the job's admission
-- stands at, and lapses one window after it.

-- The instant a job's unlapsed admission stands at, or nil. (A marker of
-- the format before holds when it lapses.)
local function admitted(marker_key, window, now)
  local m = redis.call('GET', marker_key)
  if not m then return nil end
  local t
  if string.sub(m, 1, 1) == '@' then t = tonumber(string.sub(m, 2)) else t = tonumber(m) - window end
  if t and t + window > now then return t end
  return nil
end
