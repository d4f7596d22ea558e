-- hydrate.lua: puts a session read from the database back into Redis, unless
-- Redis has it already (a concurrent append or another loader won the race).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- ARGV[1] -> incarnation, ARGV[2] -> create time µs, ARGV[3] -> update time µs
-- ARGV[4] -> last seq (all of it is in the database)
-- ARGV[5] -> TTL in ms (the hydrated session is fully flushed)
-- ARGV[6] -> number of state pairs S, then S pairs (key, JSON value)
-- then E, then E triples (seq, timestamp µs, event JSON), ascending
-- The indexes are left alone: a session in the database is in the user index
-- while that index is complete, and app listings read it from the database.
-- Returns 1 hydrated, 0 when Redis already holds the session (or its tombstone).
local sess, events = KEYS[1], KEYS[2]
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
local i = 7
for _ = 1, tonumber(ARGV[6]) do
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
return 1
