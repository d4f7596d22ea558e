-- hydrate_state.lua: puts a user's or an app's state read from the database
-- back into Redis, unless Redis has it already; for a user, also adds the
-- user's sessions to the user index.
--
-- KEYS[1] -> state hash       <ns>adk:{shard}:u:<app>:<user>  or  <ns>adk:{a:<app>}:a
-- KEYS[2] -> user index zset  <ns>adk:{shard}:us:<app>:<user> (absent for an app)
-- ARGV[1] -> revision of the state in the database
-- ARGV[2] -> TTL in ms ("" = none)
-- ARGV[3] -> number of pairs P, then P pairs (key without prefix, JSON value)
-- then N, then N pairs (update time µs, session id) for the user index (absent for an app)
-- Returns 1 hydrated, 0 when Redis already holds the state.
-- Bad arguments are an error reply, with nothing written.
local state = KEYS[1]
local rev = int(argv_int(1, 0, MAX_INT))
local ttl = ARGV[2]
if ttl ~= '' then
  ttl = argv_int(2, 1, MAX_INT)
end
local fields, _, i = argv_pairs(3, 's:')
local members, n = {}, 0
if i <= #ARGV then
  members, n, i = argv_pairs(i, '')
  for j = 1, n do
    members[2 * j - 1] = int(argv_int(i - 2 * n + 2 * j - 2, 0, MAX_INT))
  end
end
if i - 1 ~= #ARGV then
  fail('hydrate_state: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end
if n > 0 and not KEYS[2] then
  fail('hydrate_state: index entries without an index key')
end

if redis.call('EXISTS', state) == 1 then
  return 0
end
redis.call('HSET', state, 'm:rev', rev, 'm:fl', rev)
chunked('HSET', state, fields)
if ttl ~= '' then
  redis.call('PEXPIRE', state, ttl)
  redis.call('HSET', state, 'm:ttl', 1)
end
if n > 0 then
  for lo = 1, #members, CHUNK do
    redis.call('ZADD', KEYS[2], 'NX', unpack(members, lo, math.min(lo + CHUNK - 1, #members)))
  end
end
return 1
