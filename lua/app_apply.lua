#!lua flags=allow-oom
-- app_apply.lua: applies the app: part of an event's state delta, once per event. Allowed when Redis is
-- full (allow-oom): it completes an event Redis already took, and the flusher's repair runs it.
--
-- KEYS[1] -> app state hash   <ns>adk:{a:<app>}:a
-- KEYS[2] -> applied ids zset <ns>adk:{a:<app>}:ap
-- ARGV[1] -> id of the change (event id, or "c/<µs>/<user>/<sid>" for a create)
-- ARGV[2] -> now in ms
-- ARGV[3] -> how long applied ids are remembered, in ms
-- ARGV[4] -> "1" when a database backs Redis (a missing app hash means evicted or flushed away)
-- ARGV[5] -> number of pairs P, then P pairs (key without "app:", JSON value)
-- Returns 1 when applied, 0 when this id was applied before (a retry or the flusher's repair),
--         -4 when the app state is not cached (load it, then retry).
local state, applied = KEYS[1], KEYS[2]
if redis.call('ZSCORE', applied, ARGV[1]) then
  return 0
end
if ARGV[4] == '1' and redis.call('EXISTS', state) == 0 then
  return -4
end
local fields = {}
local i = 6
for _ = 1, tonumber(ARGV[5]) do
  fields[#fields + 1] = 's:' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  i = i + 2
end
if #fields > 0 then
  redis.call('HSET', state, unpack(fields))
end
redis.call('HINCRBY', state, 'm:rev', 1)
redis.call('ZADD', applied, ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', applied, '-inf', string.format('(%d', tonumber(ARGV[2]) - tonumber(ARGV[3])))
return 1
