-- hydrate_index.lua: completes a user's session index that Redis lost (or
-- never had), from the sessions the database has and those whose create is
-- not flushed yet (read from the app index), and marks it complete.
--
-- KEYS[1]   -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[2]   -> read guards hash <ns>adk:{shard}:g
-- KEYS[2+i] -> session hash of the i-th session  <ns>adk:{shard}:s:<app>:<user>:<sid>
-- ARGV[1]   -> TTL in ms, given unless the index exists without one (it then holds unflushed writes)
-- ARGV[2], ARGV[3] -> the user's field in the read guards hash, and the guard read before the database
--                    ("<counter>@<epoch>", guard_moved)
-- ARGV[2i+2], ARGV[2i+3] -> the i-th session: id, and update time µs in the database ("" = not there)
-- A session Redis holds is indexed at its own update time (it may have unflushed events), one deleted in
-- Redis (tombstone) not at all; a session already indexed keeps its score (an append wrote it).
-- Returns the number of sessions added, or -11 when the guard moved (a delete of one of the user's sessions
-- was flushed since the database was read: read it again), with nothing written.
local index, guards, ttl = KEYS[1], KEYS[2], argv_int(1, 1, MAX_INT)
local n = #KEYS - 2
if n < 0 or #ARGV ~= 2 * n + 3 then
  fail('hydrate_index: want the read guards hash, then 2 arguments per session key')
end
for i = 1, n do
  if ARGV[2 * i + 3] ~= '' then
    argv_int(2 * i + 3, 0, MAX_INT)
  end
end
if guard_moved(guards, ARGV[2], ARGV[3]) then
  return -11
end
local keep = redis.call('PTTL', index) == -1

local added, batch = 0, {}
local function add()
  if #batch > 0 then
    added = added + redis.call('ZADD', index, 'NX', unpack(batch))
    batch = {}
  end
end
for i = 1, n do
  local meta = redis.call('HMGET', KEYS[2 + i], 'm:ut', 'm:del')
  local score = meta[1] or ARGV[2 * i + 3]
  if meta[2] ~= '1' and score ~= '' then
    batch[#batch + 1] = score
    batch[#batch + 1] = ARGV[2 * i + 2]
    if #batch == 1000 then
      add()
    end
  end
end
add()
redis.call('ZADD', index, 'NX', 0, '')
if not keep then
  redis.call('PEXPIRE', index, ttl)
end
return added
