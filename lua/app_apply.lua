#!lua flags=allow-oom
-- app_apply.lua: applies the app: part of an event's state delta, once per change. Allowed when Redis is
-- full (allow-oom): it completes an event Redis already took, and the flusher's repair runs it.
--
-- KEYS[1] -> app state hash   <ns>adk:{a:<app>}:a
-- KEYS[2] -> applied ids zset <ns>adk:{a:<app>}:ap
-- ARGV[1] -> id of the change, unique across the app's sessions ("e/<incarnation µs>/<user>:<sid>/<event id>"
--            for an event, "c/<incarnation µs>/<user>:<sid>" for a create; user and sid escaped)
-- ARGV[2] -> now in ms
-- ARGV[3] -> how long applied ids are remembered, in ms
-- ARGV[4] -> "1" when a database backs Redis (a missing app hash means evicted or flushed away)
-- ARGV[5] -> number of pairs P, then P pairs (key without "app:", JSON value)
-- Returns 1 when applied, 0 when this id was applied before (a retry or the flusher's repair),
--         -4 when the app state is not cached (load it, then retry).
-- Bad arguments are an error reply, with nothing written.
local state, applied = KEYS[1], KEYS[2]
local now = argv_int(2, 0, MAX_INT)
local keep = argv_int(3, 0, MAX_INT)
local fields, _, i = argv_pairs(5, 's:')
if i - 1 ~= #ARGV then
  fail('app_apply: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end

if redis.call('ZSCORE', applied, ARGV[1]) then
  return 0
end
if ARGV[4] == '1' and redis.call('EXISTS', state) == 0 then
  return -4
end
chunked('HSET', state, fields)
redis.call('HINCRBY', state, 'm:rev', 1)
redis.call('ZADD', applied, int(now), ARGV[1])
redis.call('ZREMRANGEBYSCORE', applied, '-inf', '(' .. int(now - keep))
return 1
