-- hydrate.lua: puts a session read from the database back into Redis, unless
-- Redis has it already (a concurrent append or another loader won the race).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[4] -> app index zset   <ns>adk:{shard}:as:<app>
-- ARGV[1] -> incarnation, ARGV[2] -> create time µs, ARGV[3] -> update time µs
-- ARGV[4] -> last seq (all of it is in the database)
-- ARGV[5] -> TTL in ms (the hydrated session is fully flushed)
-- ARGV[6] -> session id, ARGV[7] -> app index member
-- ARGV[8] -> number of state pairs S, then S pairs (key, JSON value)
-- then E, then E triples (seq, timestamp µs, event JSON), ascending
-- Returns 1 hydrated, 0 when Redis already holds the session (or its tombstone).
local sess, events, uindex, aindex = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local meta = redis.call('HMGET', sess, 'm:rev', 'm:del', 'm:cnt')
if meta[2] == '1' then
  return 0
end
if meta[1] and redis.call('ZCARD', events) == tonumber(meta[3]) then
  return 0
end
-- Missing, or partly evicted: replace whatever is left.
redis.call('DEL', sess, events)

local rev = tonumber(ARGV[4])
local fields = {'m:inc', ARGV[1], 'm:ct', ARGV[2], 'm:ut', ARGV[3], 'm:rev', ARGV[4], 'm:fl', ARGV[4]}
local i = 9
for _ = 1, tonumber(ARGV[8]) do
  fields[#fields + 1] = 's:' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  i = i + 2
end
local n = tonumber(ARGV[i])
i = i + 1
local first = rev + 1
if n > 0 then
  first = tonumber(ARGV[i])
  local members = {}
  for _ = 1, n do
    members[#members + 1] = ARGV[i + 1]
    members[#members + 1] = ARGV[i] .. ':' .. ARGV[i + 2]
    i = i + 3
  end
  redis.call('ZADD', events, unpack(members))
end
fields[#fields + 1] = 'm:first'
fields[#fields + 1] = first
fields[#fields + 1] = 'm:cnt'
fields[#fields + 1] = n
redis.call('HSET', sess, unpack(fields))
redis.call('PEXPIRE', sess, ARGV[5])
if n > 0 then
  redis.call('PEXPIRE', events, ARGV[5])
end
redis.call('ZADD', uindex, ARGV[3], ARGV[6])
redis.call('ZADD', aindex, 0, ARGV[7])
return 1
