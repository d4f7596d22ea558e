-- compacted_calls.lua: the second step of a compacted view (get.lua) whose ranges reached below the cached
-- tail: the calls of the responses the caller read there, and the answers to their calls, from the compaction
-- index (index.lua), as the session was at the first step.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- ARGV[1] -> the session's incarnation at the first step
-- ARGV[2] -> its revision (last seq) then: later events are not of that view
-- ARGV[3..] -> the response ids
-- Returns {0, events (member, score, ... in seq order), older (seq, ts, ...: in the database only)};
--         {-5} the index is gone, or of another incarnation (read the view from the whole history).
-- Bad arguments are an error reply.
-- Cost: O(log n + k) for the k events of the ids.
local sess, events, undo = KEYS[1], KEYS[2], KEYS[3]
local inc, rev = argv_int(1, 0, MAX_INT), argv_int(2, 0, MAX_INT)
local meta = redis.call('HMGET', sess, 'm:inc', 'm:first', 'm:del')
if tonumber(meta[1]) ~= inc or meta[3] == '1' or redis.call('HEXISTS', undo, 'xok') == 0 then
  return {-5}
end
local ids = {}
for j = 3, #ARGV do
  ids[#ids + 1] = ARGV[j]
end
local want = {}
index_calls(undo, ids, function(ref)
  local q, t = string.match(ref, '^(%d+)/(%d+)$')
  q = tonumber(q)
  if q <= rev then
    want[q] = t
  end
end)
local out, older = index_fetch(events, want, tonumber(meta[2]))
return {0, out, older}
