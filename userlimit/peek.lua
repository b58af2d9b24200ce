-- peek.lua: prepended to an algorithm's script (the preambles, its marker
-- reader, its decide function and decide.lua) to make a read-only copy of
-- it: the decision a new job would get, with nothing written.
--
-- It declares a local `redis` that every line after it sees instead of the
-- server's: reads (GET, HGETALL, ZSCORE, ZCOUNT, ZRANGE, ZRANGEBYSCORE,
-- TIME) go to the server; writes (SET, DEL, HSET, HDEL, ZADD, ZREM,
-- ZREMRANGEBYSCORE, PEXPIRE) are dropped. A script never reads back what it
-- wrote, except sliding_log's ZRANGE of the newest entry after its ZADD
-- (for the log's TTL), which sees the dropped ZADD here.
--
-- KEYS, ARGV and the reply are decide.lua's; the job id passed is one no
-- job can have (its state and marker keys hold nothing).
local real = redis
local writes = {
  SET = true, DEL = true, HSET = true, HDEL = true, ZADD = true, ZREM = true,
  ZREMRANGEBYSCORE = true, PEXPIRE = true,
}
local added = {} -- key -> {member, score} of a dropped ZADD
local redis = {
  call = function(cmd, ...)
    local c = string.upper(cmd)
    if writes[c] then
      if c == 'ZADD' then
        local args = {...}
        added[args[1]] = {args[3], args[2]}
      end
      return 0
    end
    local reply = real.call(cmd, ...)
    if c == 'ZRANGE' then
      local key = ...
      local a = added[key]
      if a and (#reply < 2 or tonumber(reply[#reply]) < tonumber(a[2])) then
        return a
      end
    end
    return reply
  end,
  error_reply = real.error_reply,
  status_reply = real.status_reply,
}
