-- delete.lua: deletes a session and its events; app and user state stay.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[5] -> app index zset   <ns>adk:{shard}:as:<app>
-- KEYS[6] -> change log       <ns>adk:{shard}:log
-- KEYS[7] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- KEYS[8] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- ARGV[1..4] -> the change-logging scripts' common prefix (lib.lua): "" without a database, else the
--            flusher's wake channel (leave a tombstone, log the delete); app name, user id, session id (raw)
-- ARGV[5] -> now in µs, in [0, 2^53) (the incarnation to delete when the session is not cached)
-- ARGV[6] -> member of the app index ("<user>:<sid>", escaped)
-- Returns {1} when a cached session was deleted, {0} otherwise.
-- Bad arguments are an error reply, with nothing written.
local sess, events, temp, uindex, aindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = int(argv_int(5, 0, MAX_INT - 1))
local meta = redis.call('HMGET', sess, 'm:inc', 'm:del')
if meta[2] == '1' then
  return {0}
end
local existed = meta[1] and 1 or 0
redis.call('DEL', sess, events, temp, KEYS[7], KEYS[8])
redis.call('ZREM', uindex, ARGV[4])
redis.call('ZREM', aindex, ARGV[6])
if ARGV[1] ~= '' then
  -- The tombstone keeps a cold read from resurrecting the session from the
  -- database before the flusher has deleted it there; the flusher removes it.
  local inc = meta[1] or now
  redis.call('HSET', sess, 'm:del', 1, 'm:inc', inc)
  log_change(log, 'd', inc)
end
return {existed}
