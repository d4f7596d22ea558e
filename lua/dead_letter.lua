#!lua flags=allow-oom
-- dead_letter.lua: an operator's action on one dead letter of a shard: retry puts its change-log entry
-- back on the shard's change log (the flusher applies it again, as any entry), drop forgets it. The dead
-- letter is named by its exact text, so that an action on one another operator already handled does
-- nothing.
--
-- KEYS[1] -> dead letters list <ns>adk:{shard}:dead
-- KEYS[2] -> change log        <ns>adk:{shard}:log
-- ARGV[1] -> "retry" or "drop"
-- ARGV[2] -> the dead letter as the list holds it (JSON)
-- ARGV[3] -> retry: the number of fields F of its change-log entry, in [1, 64], then F pairs (field,
--            value); drop: 0
-- Returns 1 done, 0 when the list no longer holds that dead letter.
-- Bad arguments are an error reply, with nothing written. Allowed when Redis is full (allow-oom): it moves
-- an entry, it adds none.
local mode, entry = ARGV[1], ARGV[2]
if mode ~= 'retry' and mode ~= 'drop' then
  fail('dead_letter.lua: ARGV[1]: ' .. tostring(mode) .. ' is neither retry nor drop')
end
if entry == nil or entry == '' then
  fail('dead_letter.lua: ARGV[2]: empty dead letter')
end
local n
if mode == 'retry' then
  n = argv_int(3, 1, 64)
else
  n = argv_int(3, 0, 0)
end
if #ARGV ~= 3 + 2 * n then
  fail('dead_letter.lua: ' .. (#ARGV - 3) .. ' arguments after ARGV[3], want ' .. 2 * n)
end
if not redis.call('LPOS', KEYS[1], entry) then
  return 0
end
if mode == 'retry' then
  local fields = {}
  for i = 4, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  redis.call('XADD', KEYS[2], '*', unpack(fields))
end
redis.call('LREM', KEYS[1], 1, entry)
return 1
