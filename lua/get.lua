-- get.lua: reads a session: meta and state, user state, a window of events, temp state.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- ARGV[1] -> keep events with timestamp >= this µs ("" = no bound)
-- ARGV[2] -> keep the newest N of those (0 = all)
-- ARGV[3] -> invocation id whose temp state to include ("" = none)
-- ARGV[4] -> "1" when a database backs Redis (a missing user hash means evicted or flushed away)
-- Returns {0, session hash (flat), user hash (flat), events (member, score, ... ascending), temp hash (flat)};
--         {-1} not cached, {-2} deleted, {-4} user state not cached, {-5} cache incomplete (evicted keys).
-- Bad arguments are an error reply.
-- Cost: O(log n + k) for n cached events and k returned.
local sess, events, temp, user = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local after, n = ARGV[1], argv_int(2, 0, MAX_INT)
if after ~= '' then
  after = int(argv_int(1, 0, MAX_INT))
end

local h = redis.call('HGETALL', sess)
if #h == 0 then
  return {-1}
end
local meta = redis.call('HMGET', sess, 'm:del', 'm:cnt', 'm:tinv')
if meta[1] == '1' then
  return {-2}
end
if redis.call('ZCARD', events) ~= tonumber(meta[2]) then
  return {-5}
end
if ARGV[4] == '1' and redis.call('EXISTS', user) == 0 then
  return {-4}
end

local ev
if after == '' and n == 0 then
  ev = redis.call('ZRANGE', events, 0, -1, 'WITHSCORES')
elseif after == '' then
  ev = redis.call('ZRANGE', events, -n, -1, 'WITHSCORES')
elseif n == 0 then
  ev = redis.call('ZRANGE', events, after, '+inf', 'BYSCORE', 'WITHSCORES')
else
  local rev = redis.call('ZRANGE', events, '+inf', after, 'BYSCORE', 'REV', 'LIMIT', 0, n, 'WITHSCORES')
  ev = {}
  for j = #rev - 1, 1, -2 do
    ev[#ev + 1] = rev[j]
    ev[#ev + 1] = rev[j + 1]
  end
end

local t = {}
if ARGV[3] ~= '' and meta[3] == ARGV[3] then
  t = redis.call('HGETALL', temp)
end
return {0, h, redis.call('HGETALL', user), ev, t}
