#!lua flags=allow-oom
-- prune_fence.lua: fences an idle session that a prune is about to delete from the database: its keys go,
-- and a tombstone with a TTL takes the hash's place, so that no append, Get or rehydration from the
-- database reaches the session until the prune has deleted its rows (or unfenced it: prune_unfence.lua).
-- A cached session is fenced only while it is idle, fully flushed and at the database's revision:
-- a session touched since the prune read the database is kept.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[3] -> app index zset   <ns>adk:{shard}:as:<app>
-- KEYS[4..] -> the session's other keys (events, temp, undo, ...): deleted
-- ARGV[1] -> cutoff in µs: a session updated at or after it is kept
-- ARGV[2] -> incarnation the database holds (µs)
-- ARGV[3] -> revision the database holds
-- ARGV[4] -> TTL of the fence in ms
-- ARGV[5] -> token of the prune (non-empty)
-- ARGV[6] -> session id (raw: its member in the user index)
-- ARGV[7] -> the session's member in the app index
-- ARGV[8] -> "1": a dry run, which checks and writes nothing
-- Returns {1} fenced (it was cached), {2} fenced (it was not cached, or this prune fenced it before),
--         {0, why} kept: 'deleted' (a tombstone), 'recreated' (another incarnation), 'updated'
--         (updated at or after the cutoff), 'unflushed' (changes not yet in the database), 'changed'
--         (another revision than the database's).
-- Bad arguments are an error reply, with nothing written. Allowed when Redis is full (allow-oom): a prune
-- frees memory.
local cutoff, inc, rev = argv_int(1, 0, MAX_INT - 1), argv_int(2, 0, MAX_INT - 1), argv_int(3, 0, MAX_INT - 1)
local ttl = argv_int(4, 1, MAX_INT - 1)
local token, sid = ARGV[5], ARGV[6]
if token == '' or sid == '' or ARGV[7] == '' then
  fail('prune_fence.lua: empty token, session id or app index member')
end

local sess, uindex, aindex = KEYS[1], KEYS[2], KEYS[3]
local meta = redis.call('HMGET', sess, 'm:inc', 'm:del', 'm:ut', 'm:rev', 'm:fl', 'm:prune')
local cached = 2
if meta[2] == '1' then
  if meta[6] == token then
    return {2}
  end
  return {0, 'deleted'}
end
if meta[1] then
  if tonumber(meta[1]) ~= inc then
    return {0, 'recreated'}
  end
  if tonumber(meta[3]) >= cutoff then
    return {0, 'updated'}
  end
  if tonumber(meta[5] or '0') ~= tonumber(meta[4]) then
    return {0, 'unflushed'}
  end
  if tonumber(meta[4]) ~= rev then
    return {0, 'changed'}
  end
  cached = 1
end

if ARGV[8] == '1' then
  return {cached}
end

local score = redis.call('ZSCORE', uindex, sid)
for i = 4, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', sess)
redis.call('ZREM', uindex, sid)
redis.call('ZREM', aindex, ARGV[7])
local fence = {'m:del', 1, 'm:inc', int(inc), 'm:prune', token}
if score then
  fence[#fence + 1] = 'm:us'
  fence[#fence + 1] = score
end
redis.call('HSET', sess, unpack(fence))
redis.call('PEXPIRE', sess, int(ttl))
return {cached}
