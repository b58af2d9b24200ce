-- peek.lua: prepended to an algorithm's script (the preambles, its marker
-- reader, its decide function and decide.lua) to make a read-only copy of
-- it: the decision a new job would get, with nothing written.
--
-- It declares a local `redis` that every line after it sees instead of the
-- server's: reads (GET, HGETALL, ZSCORE, ZCARD, ZCOUNT, ZRANGE,
-- ZRANGEBYSCORE, TIME) go to the server; writes (SET, DEL, HSET, HDEL,
-- ZADD, ZREM, ZREMRANGEBYSCORE, PEXPIRE) are dropped. A script never reads
-- back what it wrote, except sliding_log, which enters the job (ZADD NX)
-- before it counts the entries in the window (ZCOUNT, ZCARD) and takes it
-- out again when denied (ZREM): here the dropped entry is counted where it
-- would lie, and a ZADD NX answers that it added it (the job id is one no
-- job has). A dropped trim (ZREMRANGEBYSCORE from -inf) is remembered
-- too: a ZCARD of its key after it counts what the trim would have left
-- (a ZCOUNT above its bound), as sliding_log relies on.
--
-- KEYS, ARGV and the reply are decide.lua's; the job id passed is one no
-- job can have (its state and marker keys hold nothing).
local real = redis
local writes = {
  SET = true, DEL = true, HSET = true, HDEL = true, ZADD = true, ZREM = true,
  ZREMRANGEBYSCORE = true, PEXPIRE = true,
}
local added = {} -- key -> {member, score} of a dropped ZADD, until its ZREM
local trimmed = {} -- key -> the ZCOUNT lower bound of what a dropped trim leaves

-- within says whether score lies inside a ZCOUNT bound: lo (true) or hi.
local function within(score, bound, lo)
  if bound == '-inf' or bound == '+inf' then return true end
  local open = string.sub(bound, 1, 1) == '('
  local b = tonumber(open and string.sub(bound, 2) or bound)
  if lo then
    return score > b or (not open and score == b)
  end
  return score < b or (not open and score == b)
end

local redis = {
  call = function(cmd, ...)
    local c = string.upper(cmd)
    local args = {...}
    if writes[c] then
      if c == 'ZADD' then
        local n = #args
        added[args[1]] = {args[n], tonumber(args[n - 1])}
        return 1
      elseif c == 'ZREMRANGEBYSCORE' and args[2] == '-inf' then
        local hi = args[3]
        if string.sub(hi, 1, 1) == '(' then
          trimmed[args[1]] = string.sub(hi, 2)
        else
          trimmed[args[1]] = '(' .. hi
        end
      elseif c == 'ZREM' then
        local a = added[args[1]]
        if a and a[1] == args[2] then
          added[args[1]] = nil
          return 1
        end
      end
      return 0
    end
    local reply
    if c == 'ZCARD' and trimmed[args[1]] then
      reply = real.call('ZCOUNT', args[1], trimmed[args[1]], '+inf')
    else
      reply = real.call(cmd, ...)
    end
    local a = added[args[1]]
    if a and c == 'ZCOUNT' and within(a[2], args[2], true) and within(a[2], args[3], false) then
      return reply + 1
    elseif a and c == 'ZCARD' then
      return reply + 1
    end
    return reply
  end,
  error_reply = real.error_reply,
  status_reply = real.status_reply,
}
