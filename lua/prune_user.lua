#!lua flags=allow-oom
-- prune_user.lua: drops a user's cached state and session index once a prune deleted the user's last
-- session and state row from the database, unless Redis still holds something of the user's that the
-- database does not have yet: a session in the user's index or in the app index (a create not flushed),
-- or a user state revision not flushed (then the flusher writes the state back, as it is in Redis).
--
-- KEYS[1] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- KEYS[2] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[3] -> app index zset   <ns>adk:{shard}:as:<app>
-- ARGV[1] -> user id (raw, non-empty, without NUL: app index members are "<user> NUL <sid>")
-- Returns 1 when the keys were dropped (or absent), 0 when the user still has something in Redis.
-- Bad arguments are an error reply, with nothing written. Allowed when Redis is full (allow-oom).
local user = ARGV[1]
if user == '' or string.find(user, '\0', 1, true) then
  fail('prune_user.lua: ARGV[1]: the user id is empty or holds NUL')
end
local ustate, uindex, aindex = KEYS[1], KEYS[2], KEYS[3]
local n = redis.call('ZCARD', uindex)
if n > 1 or (n == 1 and not redis.call('ZSCORE', uindex, '')) then
  return 0
end
if #redis.call('ZRANGE', aindex, '[' .. user .. '\0', '(' .. user .. '\1', 'BYLEX', 'LIMIT', 0, 1) > 0 then
  return 0
end
local meta = redis.call('HMGET', ustate, 'm:rev', 'm:fl')
if meta[1] and tonumber(meta[2] or '0') < tonumber(meta[1]) then
  return 0
end
redis.call('DEL', ustate, uindex)
return 1
