-- runid.lua (prepended to reserve.lua and cancel.lua): run_id() is this
-- server run's id, from INFO server, or nil from a server that does not
-- say (whose state is then never trusted). The id is found as plain text
-- and read where it starts: a pattern searched through the whole reply
-- cost as much as INFO itself, about 30,000 instructions a call (callgrind).
local function run_id()
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  return at and string.match(info, '^%x+', at + 7)
end
