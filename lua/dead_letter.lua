#!lua flags=allow-oom
-- dead_letter.lua: an operator's action on one dead letter of a shard: retry puts its change-log entry
-- back on the shard's change log (the flusher applies it again, as any entry), drop forgets it. The dead
-- letter is named by its exact text, so that an action on one another operator already handled does
-- nothing.
--
-- KEYS[1] -> dead letters list <ns>adk:{shard}:dead
-- KEYS[2] -> change log        <ns>adk:{shard}:log
-- KEYS[3] -> the session hash  <ns>adk:{shard}:s:<app>:<user>:<sid> of a letter that holds it (a session
--            unit whose events were not written: m:hold counts them), else KEYS[1]
-- ARGV[1] -> "retry" or "drop"
-- ARGV[2] -> the dead letter as the list holds it (JSON)
-- ARGV[3] -> drop: 1 to release the session's hold (m:hold - 1), else 0; retry: 0 (the retried entry carries
--            h = 1 and its flush releases the hold)
-- ARGV[4] -> retry: the number of fields F of its change-log entry, in [1, 64], then F pairs (field,
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
local n, release
if mode == 'retry' then
  release = argv_int(3, 0, 0)
  n = argv_int(4, 1, 64)
else
  release = argv_int(3, 0, 1)
  n = argv_int(4, 0, 0)
end
if #ARGV ~= 4 + 2 * n then
  fail('dead_letter.lua: ' .. (#ARGV - 4) .. ' arguments after ARGV[4], want ' .. 2 * n)
end
if not redis.call('LPOS', KEYS[1], entry) then
  return 0
end
if mode == 'retry' then
  local fields = {}
  for i = 5, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  redis.call('XADD', KEYS[2], '*', unpack(fields))
elseif release == 1 then
  local held = tonumber(redis.call('HGET', KEYS[3], 'm:hold') or '0')
  if held > 1 then
    redis.call('HSET', KEYS[3], 'm:hold', int(held - 1))
  elseif held == 1 then
    redis.call('HDEL', KEYS[3], 'm:hold')
  end
end
redis.call('LREM', KEYS[1], 1, entry)
return 1
