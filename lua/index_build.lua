#!lua
-- index_build.lua: builds, a chunk of events per call, the compaction index (index.lua) of a session whose undo hash
-- lacks it (read back from the database, or forked): the service sends the whole history it read for a
-- compacted view, oldest first. Between calls the session must not move: an append (which does not index a
-- session without xok) makes the next call refuse, and the index is built again by a later read.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- ARGV[1] -> the session's incarnation when its history was read
-- ARGV[2] -> its revision (last seq) then: the history is seqs 1 to it
-- ARGV[3] -> seq of the chunk's first event (1: the first chunk, which starts the index afresh)
-- ARGV[4..] -> for each event of the chunk, in seq order: its timestamp µs, its invocation id, its index entry
--              (service.compactionIndexEntry)
-- Returns {0, 1} the index is whole (xok set), {0, 0} the chunk is indexed, send the next;
--         {-5} the session moved (another incarnation, a later revision, a deleted session, another build
--           between, or the chunk is not the next): nothing written.
-- Bad arguments are an error reply, with nothing written.
-- Cost: O(k) for the k events of the chunk.
local sess, undo = KEYS[1], KEYS[2]
local inc, rev, from = argv_int(1, 0, MAX_INT), argv_int(2, 1, MAX_INT), argv_int(3, 1, MAX_INT)
if (#ARGV - 3) % 3 ~= 0 or #ARGV == 3 then
  fail('index_build: ' .. (#ARGV - 3) .. ' arguments after the first three, a positive multiple of 3 expected')
end
local n = (#ARGV - 3) / 3
if from + n - 1 > rev then
  fail('index_build: events ' .. from .. ' to ' .. (from + n - 1) .. ' pass revision ' .. rev)
end
local xs = {}
for j = 1, n do
  argv_int(3 + 3 * j - 2, 0, MAX_INT - 1)
  xs[j] = ARGV[3 + 3 * j] ~= '' and index_read(ARGV[3 + 3 * j]) or index_none()
end

local meta = redis.call('HMGET', sess, 'm:inc', 'm:rev', 'm:del')
if tonumber(meta[1]) ~= inc or tonumber(meta[2]) ~= rev or meta[3] == '1' then
  return {-5}
end
local b = redis.call('HMGET', undo, 'xok', 'xb', 'xv')
if b[1] or (from > 1 and tonumber(b[2]) ~= from) then
  return {-5}
end
local prev = from > 1 and b[3] or nil
if from == 1 then
  -- Afresh: the fields another build left are of this very history (the hash goes with the incarnation), so
  -- what they say is true; only the list head and the count of events every view reads start again.
  redis.call('HDEL', undo, 'xH', 'xA')
  local ttl = redis.call('PTTL', sess)
  if ttl > 0 then
    redis.call('PEXPIRE', undo, ttl)
  end
end
for j = 1, n do
  local ts, inv = ARGV[3 + 3 * j - 2], ARGV[3 + 3 * j - 1]
  index_event(undo, int(from + j - 1), ts, inv, xs[j], inv ~= prev)
  prev = inv
end
if from + n - 1 == rev then
  redis.call('HDEL', undo, 'xb', 'xv')
  redis.call('HSET', undo, 'xok', 1)
  return {0, 1}
end
redis.call('HSET', undo, 'xb', int(from + n), 'xv', prev)
return {0, 0}
