-- reserve.lua: take the next send slots of a provider's virtual queue (GCRA),
-- for one reservation or several in a row (the reservations of many jobs
-- in one script run: the same answers, in order, as that many calls at one
-- instant).
--
-- KEYS[1]  {<prefix>p:<provider>}:tat    hash: tat (µs), seq (write counter), node (writer's run_id)
-- KEYS[2]  {<prefix>p:<provider>}:pause  string: pause end (µs)
-- ARGV[1]  mqd:  max queue delay, µs
-- ARGV[2]  cold: µs ahead of now a queue with no trusted state starts (mqd + ⌈max cost × interval⌉)
-- ARGV[3]  idle: ms the state outlives its drained queue
-- ARGV[4]  now:  µs since the Unix epoch (optional, tests only: '' for Redis TIME)
-- ARGV[5]  guard: "1" to trust only a state written by this server run (run_id), "0" not to check
-- ARGV[6]  n:    the number of shape arguments that follow; 0 for a plain contract
-- ARGV[7…6+n]    shape (adaptive rate, quotas; see below), when n > 0
-- ARGV[7+n…]     plain: inc, µs each reservation adds to tat (⌈cost × interval⌉),
--                one per reservation, in order; shaped: inc and cost (units) of
--                each reservation, in order (inc at the contract's full rate)
--
-- Reply: plain: four integers per reservation, in order:
--        {1, delay µs, slot µs, seq} when reserved,
--        {0, retry-after µs, paused µs, 0} when the queue is full;
--        shaped: five, {1, delay, slot, seq, inc µs added to tat} or
--        {0, retry-after, paused, 0, quota index (0-based) whose window is spent or -1};
--        paused: the provider's pause still to run at the call (0: none), so
--        that a caller refused because of a pause knows it without asking.
--
-- A state with no tat, or (guard) written by another Redis server or an
-- earlier run of this one (failover, restart from disk: possibly older than
-- slots already handed out), is not trusted: tat = max(tat, now + cold), i.e.
-- a full queue. The first reservation that finds it so writes it back (the
-- cold start is remembered, or the next call would start cold again); each
-- reservation made adds one to seq, as does remembering a cold start.
--
-- Every argument is checked against what Contract.validate and the
-- options allow (an integer below 2^53 in every sum below) before anything
-- is written; one out of range stops the script with an error naming it.
-- Expiries go through ttl_ms: none past luapre.MaxTTL.
--
-- Prepended (redis.go): internal/luapre's now.lua (now_us) and num.lua
-- (idiv, ttl_ms, whole, arg), then shaping.lua (adaptive, effective,
-- climbed) and runid.lua (run_id).
local mqd = whole('mqd', ARGV[1], 0, EXACT / 4)
local cold = whole('cold', ARGV[2], 0, EXACT / 2)
local idle = whole('idle', ARGV[3], 0, MAX_TTL_MS)
local now = now_us(ARGV[4])
local guard = ARGV[5] == '1'
local nshape = whole('n', ARGV[6], 0, 17)
local node = '-'
if guard then
  node = run_id()
end

local st = redis.call('HMGET', KEYS[1], 'tat', 'seq', 'node')
local tat = tonumber(st[1])
local seq = tonumber(st[2]) or 0
local trusted = tat ~= nil and (st[3] == node or not guard)
if not trusted then
  tat = math.max(tat or 0, now + cold)
end
local pause = tonumber(redis.call('GET', KEYS[2]))
local paused = 0
if pause ~= nil and pause > now then
  paused = pause - now
end

-- A plain contract is a shaped one at its full rate with no quotas: nq and
-- pq stay 0, and the one reservation step below serves both.
local shaped = nshape > 0
local nq = 0      -- the number of quotas
local pq = 0      -- the pace in quanta, 0 at the full rate
local keep = 0    -- µs the state must live for its quota windows and the climb
local per, limit, qs, qu = {}, {}, {}, {}

-- Shaped: the adaptive rate and the quotas, with the same integer
-- arithmetic as shaping.go (every value an integer below 2^53).
--
-- ARGV[7]   rate: the contract's rate in quanta (1e-6 units/s); 0: not adaptive
-- ARGV[8]   min:  the adaptive min rate in quanta
-- ARGV[9]   pace: 1 − headroom (a float)
-- ARGV[10]  increase: quanta per second of climb
-- ARGV[11]  quiet: µs after a backoff before the climb
-- ARGV[12]  dcap: µs of climb that reach rate from min
-- ARGV[13]  hold: µs after quiet before the probe above the target
-- ARGV[14]  convex: ms, the probe's convexity (shaping.lua's probe)
-- ARGV[15]  nq:   the number of quotas, then per (µs) and limit of each
--
-- State fields beside tat in KEYS[1]: r0, t0, tg (the last backoff: to r0
-- quanta at t0 µs, the target tg quanta; see shaping.lua) and, for quota
-- j, q<j>s (the start of the window the latest slots count in, µs) and
-- q<j>u (its units).
--
-- effective and climbed come from shaping.lua, idiv from internal/luapre's
-- num.lua, both prepended.
if shaped then
  local rate = whole('rate', ARGV[7], 0, 1e13)
  local minr, pace, incq, quiet, dcap, hold, convex = 0, 0, 0, 0, 0, 0, 1
  if rate > 0 then
    minr = whole('min', ARGV[8], 1, rate)
    pace = arg('pace', ARGV[9], 0.5, 1)
    incq = whole('increase', ARGV[10], 1, 9e9)
    quiet = whole('quiet', ARGV[11], 0, EXACT / 4)
    dcap = whole('dcap', ARGV[12], 0, EXACT)
    hold = whole('hold', ARGV[13], 0, EXACT / 4)
    convex = whole('convex', ARGV[14], 1, EXACT / 4)
  end
  nq = whole('nq', ARGV[15], 0, 4)
  local fields = {'r0', 't0', 'tg'}
  for j = 1, nq do
    per[j] = whole('per', ARGV[14 + 2 * j], 1000000, 31622400000000)
    limit[j] = whole('limit', ARGV[15 + 2 * j], 1, EXACT / 4)
    fields[#fields + 1] = 'q' .. j .. 's'
    fields[#fields + 1] = 'q' .. j .. 'u'
  end
  local sh = redis.call('HMGET', KEYS[1], unpack(fields))
  for j = 1, nq do
    qs[j] = tonumber(sh[2 + 2 * j]) or 0
    qu[j] = tonumber(sh[3 + 2 * j]) or 0
  end

  -- the state must live until every quota window it counts in has ended
  -- and the adaptive climb has reached the rate
  if rate > 0 then
    local r0, t0, tg = tonumber(sh[1]), tonumber(sh[2]), tonumber(sh[3])
    if r0 ~= nil and r0 > 0 and t0 ~= nil then
      local eff = effective(rate, minr, incq, quiet, dcap, hold, convex, r0, t0, tg, now)
      if eff < rate then
        pq = math.max(1, math.floor(eff * pace))
      end
      keep = t0 + climbed(rate, r0, incq, quiet, dcap, hold) - now
    end
  end
end

-- window is the start of quota j's window that a slot counts in: its own,
-- or a later one the state already counts in (shaping.go's window).
local function window(slot, j)
  return math.max(idiv(slot, per[j]) * per[j], qs[j])
end

-- The reservations: plain, one inc each; shaped, inc and cost each.
local first, step = 7 + nshape, 1
if shaped then
  step = 2
end
for i = first, #ARGV, step do
  whole('inc', ARGV[i], 1, EXACT / 4)
  if shaped then
    whole('cost', ARGV[i + 1], 1, EXACT / 4)
  end
end

local maxinc = 2251799813685248 -- 2^53 / 4
local out = {}
local dirty = false
for i = first, #ARGV, step do
  local cost = 0
  if shaped then
    cost = num(ARGV[i + 1])
  end
  local slot = math.max(now, tat)
  if pause ~= nil and pause > slot then
    slot = pause
  end
  -- past every spent quota window, to the next window's start
  local hit = -1
  local moved = true
  while moved do
    moved = false
    for j = 1, nq do
      local start = window(slot, j)
      local used = 0
      if qs[j] == start then
        used = qu[j]
      end
      if used + cost > limit[j] then
        slot = start + per[j]
        hit = j - 1
        moved = true
      end
    end
  end
  local reserved = slot - now <= mqd
  if reserved or not trusted then
    seq = seq + 1
    dirty = true
  end
  trusted = true
  if reserved then
    for j = 1, nq do
      local start = window(slot, j)
      if qs[j] == start then
        qu[j] = qu[j] + cost
      else
        qs[j] = start
        qu[j] = cost
      end
    end
    local inc = num(ARGV[i])
    if pq > 0 then
      local a = math.min(idiv(cost * 1000000000000 + pq - 1, pq), maxinc)
      if a > inc then
        inc = a
      end
    end
    tat = slot + inc
    out[#out + 1] = 1
    out[#out + 1] = slot - now
    out[#out + 1] = slot
    out[#out + 1] = seq
    if shaped then
      out[#out + 1] = inc
    end
  else
    out[#out + 1] = 0
    out[#out + 1] = slot - now - mqd
    out[#out + 1] = paused
    out[#out + 1] = 0
    if shaped then
      out[#out + 1] = hit
    end
  end
end
if dirty then
  local set = {'tat', tat, 'seq', seq, 'node', node}
  for j = 1, nq do
    set[#set + 1] = 'q' .. j .. 's'
    set[#set + 1] = qs[j]
    set[#set + 1] = 'q' .. j .. 'u'
    set[#set + 1] = qu[j]
    keep = math.max(keep, qs[j] + per[j] - now)
  end
  redis.call('HSET', KEYS[1], unpack(set))
  redis.call('PEXPIRE', KEYS[1], ttl_ms(math.max(math.ceil((tat - now + mqd) / 1000) + idle, math.ceil(keep / 1000))))
end
return out
