#!lua flags=allow-oom
-- flushed.lua: records that a session's changes up to a revision are in the
-- database; trims flushed events beyond the cache limit; lets idle, fully
-- flushed keys expire (the user index with the user hash); removes a flushed
-- session from the app index and a flushed tombstone. Allowed when Redis is
-- full (allow-oom): it is what makes memory evictable.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- KEYS[4] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- KEYS[5] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[6] -> app index zset   <ns>adk:{shard}:as:<app>
-- KEYS[7] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- KEYS[8] -> read guards hash <ns>adk:{shard}:g
-- KEYS[9] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid> (a rebased session's hash goes: the temp hash
--                             keeps the name of the invocation that owns it, m:tinv, until hydrate.lua puts it back)
-- ARGV[1] -> incarnation the flushed changes belong to
-- ARGV[2] -> last seq now in the database; "d" for a flushed delete; "" when nothing of the session was
--            written (the database refused it: its keys keep no TTL)
-- ARGV[3] -> user-state revision now in the database ("" = none flushed)
-- ARGV[4] -> TTL in ms for idle, fully flushed keys
-- ARGV[5] -> most flushed events to keep cached
-- ARGV[6] -> member of the session in the app index
-- ARGV[7], ARGV[8] -> the session's and the user's fields in the read guards hash: each is moved (HINCRBY) when
--            Redis may let go of what the database now holds newer than a cold read that began before
--            (docs/design.md, "Cold reads"): the session's when its keys get a TTL or its tombstone goes,
--            the user's when the user hash gets a TTL or one of the user's tombstones goes
-- ARGV[9] -> rebased parts: "" none, else "s" (the session) and/or "u" (its user) were out of step with the
--            database and written rebased onto it (docs/design.md, "Redis behind the database"): their keys
--            are deleted instead of given a TTL once they hold nothing unflushed (the next read puts back
--            what the database holds), a rebased session's events are not trimmed, and a rebased session or
--            user hash that still holds unflushed writes is marked m:rb = 1, so the flusher keeps rebasing it
-- ARGV[10] -> the change in the session's held dead letters (m:hold, an integer, may be negative): its entries
--            dead-lettered with its row refused and its events not written (+), and such entries retried and
--            written now (-). While m:hold > 0 the database lacks some of the session's events, which Redis
--            alone holds: its keys get no TTL and its events are not trimmed.
-- ARGV[11] -> the id of the event at ARGV[2] ("" when the batch wrote none): the copy is marked only while
--            that seq is that event's in it (ids zset), not another event's that a copy Redis came back with
--            numbered the same
-- ARGV[12] -> the user hash's flush count read with the user-state revision (m:fc, state_read.lua; 0:
--            unknown): a hash whose count is below it is an older copy than the one read, and its revision
--            is not marked; otherwise the database records that count now, and the hash's m:fr (one above the
--            greatest count it knows recorded) goes past it
-- ARGV[13] -> the update time µs the batch wrote into the session's row ("" when it wrote none)
-- ARGV[14] -> the session id (its member in the user index)
-- The user index follows the database's update time where Redis holds nothing newer of the session: when the
-- copy of a rebased session goes, when the copy is older than the batch (Redis came back older), and when
-- Redis holds none of it (ZADD XX: the index is not re-created, a deleted session not put back).
-- Returns the number of events trimmed.
-- Bad arguments are an error reply, with nothing written.
local sess, events, user, undo, ids, temp = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[9]
if #KEYS ~= 9 then
  fail('flushed: ' .. #KEYS .. ' keys, 9 expected')
end
argv_int(1, 0, MAX_INT)
if ARGV[2] ~= '' and ARGV[2] ~= 'd' then
  argv_int(2, 0, MAX_INT)
end
if ARGV[3] ~= '' then
  argv_int(3, 0, MAX_INT)
end
local ttl, keep = argv_int(4, 1, MAX_INT), argv_int(5, 0, MAX_INT)
if #ARGV ~= 14 then
  fail('flushed: ' .. #ARGV .. ' arguments, 14 expected')
end
local uindex, ut = KEYS[5], ARGV[13]
if ut ~= '' then
  argv_int(13, -MAX_INT, MAX_INT)
end
local function index_at(...)
  if ut ~= '' then
    redis.call('ZADD', uindex, 'XX', ...)
  end
end
local hold = argv_int(10, -MAX_INT, MAX_INT)
local lastid = ARGV[11]
local ufc = argv_int(12, 0, MAX_INT)
if ARGV[9] ~= '' and ARGV[9] ~= 's' and ARGV[9] ~= 'u' and ARGV[9] ~= 'su' then
  fail('flushed: ARGV[9]: ' .. ARGV[9] .. ' is not "", "s", "u" or "su"')
end
local srebased, urebased = ARGV[9]:find('s', 1, true) ~= nil, ARGV[9]:find('u', 1, true) ~= nil
local guards, sfield, ufield = KEYS[8], ARGV[7], ARGV[8]
if sfield == '' or ufield == '' then
  fail('flushed: empty guard field')
end

if ARGV[3] ~= '' and ufc > 0 and tonumber(redis.call('HGET', user, 'm:fc') or '0') < ufc then
  -- An older copy of the hash than the one read (Redis came back older since): not marked.
elseif ARGV[3] ~= '' and redis.call('EXISTS', user) == 0 then
  redis.call('PEXPIRE', KEYS[5], ttl) -- the user hash is gone (evicted): the index follows
elseif ARGV[3] ~= '' then
  if ufc > 0 and tonumber(redis.call('HGET', user, 'm:fr') or '0') <= ufc then
    redis.call('HSET', user, 'm:fr', int(ufc + 1))
  end
  local ufl = tonumber(redis.call('HGET', user, 'm:fl') or '0')
  local urev = tonumber(redis.call('HGET', user, 'm:rev') or '0')
  local flushed = tonumber(ARGV[3])
  -- A revision above the hash's own was read from a copy Redis no longer holds (it came back older since the
  -- batch was read): this copy's writes are not flushed for all that.
  if flushed > urev then
    flushed = ufl
  end
  if flushed > ufl then
    redis.call('HSET', user, 'm:fl', int(flushed))
    ufl = flushed
  end
  if ufl >= urev and urebased then
    redis.call('DEL', user)
    redis.call('PEXPIRE', KEYS[5], ttl)
    redis.call('HINCRBY', guards, ufield, 1)
  elseif ufl >= urev then
    redis.call('PEXPIRE', user, ttl)
    redis.call('PEXPIRE', KEYS[5], ttl)
    redis.call('HSET', user, 'm:ttl', 1)
    redis.call('HINCRBY', guards, ufield, 1)
  elseif urebased then
    redis.call('HSET', user, 'm:rb', 1)
  end
elseif urebased and redis.call('EXISTS', user) == 1 then
  redis.call('HSET', user, 'm:rb', 1)
end

local meta = redis.call('HMGET', sess, 'm:inc', 'm:del', 'm:fl', 'm:rev', 'm:cnt', 'm:first', 'm:hold')
local held = tonumber(meta[7] or '0')
if meta[1] == ARGV[1] and hold ~= 0 then
  held = math.max(0, held + hold)
  if held > 0 then
    redis.call('HSET', sess, 'm:hold', int(held))
  else
    redis.call('HDEL', sess, 'm:hold')
  end
end
if meta[1] == false and ARGV[2] ~= 'd' then
  index_at(ut, ARGV[14]) -- gone (a FLUSHALL or an eviction while the batch was in flight): listed from the database
end
if meta[1] ~= ARGV[1] or ARGV[2] == '' then
  return 0 -- gone, or re-created since (the newer incarnation has its own entries), or nothing written
end
if meta[2] == '1' then
  if ARGV[2] == 'd' then
    redis.call('DEL', sess)
    redis.call('HINCRBY', guards, sfield, 1)
    redis.call('HINCRBY', guards, ufield, 1)
  end
  return 0
end
if ARGV[2] == 'd' then
  return 0
end
-- The database has the session now: app listings read it from there.
redis.call('ZREM', KEYS[6], ARGV[6])

local fl, rev, cnt, first = tonumber(meta[3]), tonumber(meta[4]), tonumber(meta[5]), tonumber(meta[6])
local seq = tonumber(ARGV[2])
if seq > rev or (lastid ~= '' and tonumber(redis.call('ZSCORE', ids, lastid)) ~= seq) then
  -- The batch read events this copy does not hold: Redis came back older since (docs/design.md, "Redis
  -- behind the database"). Its own writes are not flushed for all that: m:fl stays (so the flusher tells its
  -- new events from late ones), nothing is trimmed, nothing expires. Its place in the index is the database's
  -- time unless its own writes are newer.
  index_at('GT', ut, ARGV[14])
  return 0
end
if seq > fl then
  fl = seq
  redis.call('HSET', sess, 'm:fl', int(fl))
end

if held > 0 then
  return 0 -- the database lacks events of its dead letters: nothing is trimmed, nothing expires
end
if srebased then
  -- Its seqs are Redis's, not the database's: nothing is trimmed (a read past the cached tail would number
  -- the database's events otherwise), and the copy goes once it holds nothing unflushed.
  if fl >= rev then
    -- The running invocation's temp state is not the database's to replace (it ends with the
    -- invocation): the temp hash stays, and keeps the name the session hash held.
    local tinv = redis.call('HGET', sess, 'm:tinv')
    if tinv and redis.call('EXISTS', temp) == 1 then
      redis.call('HSET', temp, 'm:tinv', tinv)
    end
    redis.call('DEL', sess, events, ids, undo)
    redis.call('HINCRBY', guards, sfield, 1)
    index_at(ut, ARGV[14]) -- listed from the database from now on, at its time
  else
    -- Kept, holding unflushed writes: its next batches are rebased too, whatever their seqs (a copy that
    -- stored again events the database holds counts them where the database counts its own, and its
    -- next seqs can be above the rebased row's rev: simulation seed 643912492160).
    redis.call('HSET', sess, 'm:rb', 1)
  end
  return 0
end

local trim = 0
if cnt > keep then
  trim = math.min(cnt - keep, fl - first + 1)
  if trim > 0 then
    redis.call('ZREMRANGEBYRANK', events, 0, trim - 1)
    redis.call('ZREMRANGEBYSCORE', ids, '-inf', int(first + trim - 1))
    redis.call('HSET', sess, 'm:first', int(first + trim), 'm:cnt', int(cnt - trim))
    -- Undo records of trimmed events go too; a rewind reaching past them
    -- replays the history from the database instead.
    if redis.call('HEXISTS', undo, 'm:from') == 1 then
      for seq = first, first + trim - 1 do
        local rec = redis.call('HGET', undo, int(seq))
        if rec then
          local inv = undo_read(rec).i
          if inv then
            -- Not deleted: a later event of the invocation would record itself as its first, and a
            -- rewind before the invocation would stop there. 0 says the first event is older than the
            -- records (rewind.lua then replays the history from the database).
            redis.call('HSET', undo, 'i:' .. inv, 0)
          end
          redis.call('HDEL', undo, int(seq))
        end
      end
      redis.call('HSET', undo, 'm:from', int(first + trim))
    end
  else
    trim = 0
  end
end

if fl >= rev then
  redis.call('PEXPIRE', sess, ttl)
  redis.call('PEXPIRE', events, ttl)
  redis.call('PEXPIRE', ids, ttl)
  redis.call('HSET', sess, 'm:ttl', 1)
  redis.call('PEXPIRE', undo, ttl)
  redis.call('HINCRBY', guards, sfield, 1)
end
return trim
