#!lua
-- fork.lua: creates a session N of the same user holding copies of a session S's events before the first event
-- of an invocation (all of them without one), with their ids and timestamps, and the session state S had at that
-- point; atomically refusing an existing N. Both sessions are the user's, so in the user's slot.
-- The shebang (no flags) makes Redis refuse a fork as a whole, before any write, when it is full (OOM).
--
-- KEYS[1] -> S's session hash     <ns>adk:{shard}:s:<app>:<user>:<S>
-- KEYS[2] -> S's events zset      <ns>adk:{shard}:e:<app>:<user>:<S>
-- KEYS[3] -> S's undo hash        <ns>adk:{shard}:r:<app>:<user>:<S>
-- KEYS[4] -> S's event ids zset   <ns>adk:{shard}:i:<app>:<user>:<S>
-- KEYS[5] -> N's session hash     <ns>adk:{shard}:s:<app>:<user>:<N>
-- KEYS[6] -> N's events zset      <ns>adk:{shard}:e:<app>:<user>:<N>
-- KEYS[7] -> N's temp hash        <ns>adk:{shard}:t:<app>:<user>:<N>
-- KEYS[8] -> N's undo hash        <ns>adk:{shard}:r:<app>:<user>:<N>
-- KEYS[9] -> N's event ids zset   <ns>adk:{shard}:i:<app>:<user>:<N>
-- KEYS[10] -> user state hash     <ns>adk:{shard}:u:<app>:<user>
-- KEYS[11] -> user index zset     <ns>adk:{shard}:us:<app>:<user>
-- KEYS[12] -> app index zset      <ns>adk:{shard}:as:<app>
-- KEYS[13] -> change log          <ns>adk:{shard}:log
-- ARGV[1..4] -> the change-logging scripts' common prefix (lib.lua): "" without a database, else the
--            flusher's wake channel (write the change log; missing user state means evicted); app name, user
--            id, and N's id (raw: the session the change log names)
-- ARGV[5] -> N's create time in µs, in [0, 2^53) (also its incarnation)
-- ARGV[6] -> N's member of the app index ("<user> NUL <N>")
-- ARGV[7] -> token of this fork call (kept as N's m:cid): a run of the same call again finds its own session
-- ARGV[8] -> the invocation to fork before; "" copies every event
-- ARGV[9] -> "" to copy from what Redis holds of S (its events and, before an invocation, its undo records);
--            otherwise S's incarnation the history below was read at (from the full history, when Redis does
--            not hold all of S's events before the point, or its undo records do not reach it)
-- only when ARGV[9] is not "":
-- ARGV[10] -> S's create-time session state (a JSON object), N's create-time state
-- ARGV[11] -> number of state pairs P, then P pairs (key, JSON value): S's session state at the point
-- then E, then E quadruples (seq, timestamp µs, event id, event JSON), the events before the point, seqs 1..E
-- Returns {0} forked (or forked by an earlier run of this call, whose reply was lost and the client sent it
--           again: N holds this call's token);
--         {-10} N exists (in Redis, or in the database as the complete user index says);
--         {-1} S not cached, {-2} S deleted, {-5} S's cache incomplete (evicted keys), {-4} the user's state is
--           not cached or the user's session index is not complete: load, then retry;
--         {-6} the invocation is not in S;
--         {-7, S's create-time state JSON or false} Redis does not hold S's events before the point, or its undo
--           records do not reach it: read the full history and call again with ARGV[9];
--         {-3} ARGV[9] is not S's incarnation (S was created again since the history was read).
-- Nothing is written but with {0}. Bad arguments are an error reply, with nothing written.
-- Cost: O(k) for the k events copied, plus, before an invocation, the undo records of the events after the
-- point (as a rewind's); with ARGV[9] O(k) for the k events sent.
local src, sevents, sundo, sids = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local sess, events, temp, undo, ids = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local user, uindex, aindex, log = KEYS[10], KEYS[11], KEYS[12], KEYS[13]

-- Inputs, all checked before anything is read or written.
local ct = int(argv_int(5, 0, MAX_INT - 1))
local durable = ARGV[1] ~= ''
local before = ARGV[8]
local computed = ARGV[9] ~= ''
local cinc, cstate, members, idlist
if computed then
  cinc = argv_int(9, 0, MAX_INT)
  if string.sub(ARGV[10], 1, 1) ~= '{' then
    fail('fork: ARGV[10]: the create-time state is not a JSON object')
  end
  local i, n, _
  cstate, _, i = argv_pairs(11, 's:')
  n = argv_int(i, 0, MAX_INT)
  if i + 4 * n ~= #ARGV then
    fail('fork: ' .. #ARGV .. ' arguments, ' .. (i + 4 * n) .. ' expected')
  end
  members, idlist = {}, {}
  local prev = -1
  for j = 1, n do
    local at = i + 4 * j - 3
    if argv_int(at, 1, MAX_INT) ~= j then
      fail('fork: event ' .. j .. ' has seq ' .. ARGV[at] .. ', want ' .. j)
    end
    local ts = argv_int(at + 1, 0, MAX_INT - 1)
    if ts <= prev then
      fail('fork: event ' .. j .. ' is not after the one before it')
    end
    prev = ts
    members[2 * j - 1], members[2 * j] = int(ts), int(j) .. ':' .. ARGV[at + 3]
    idlist[2 * j - 1], idlist[2 * j] = int(j), ARGV[at + 2]
  end
elseif #ARGV ~= 9 then
  fail('fork: ' .. #ARGV .. ' arguments, 9 expected')
end

-- N: an id taken (but by this very call) refuses the fork (new_session_check, as create.lua).
local taken = new_session_check(sess, user, uindex, ARGV[7], durable)
if taken == 'mine' then
  return {0}
elseif taken == 'taken' then
  return {-10}
elseif taken == 'load' then
  return {-4}
end

-- S, as rewind.lua reads it.
local meta = redis.call('HMGET', src, 'm:rev', 'm:cnt', 'm:del', 'm:inc', 'm:ttl', 'm:undo', 'm:first')
if not meta[1] then
  if meta[3] == '1' then
    return {-2}
  end
  return {-1}
end
local rev, cnt, first = meta[1] + 0, meta[2] + 0, meta[7] + 0
local expiring, covered = meta[5] == '1', meta[6] == '1'

if expiring then
  if redis.call('ZCARD', sevents) ~= cnt or redis.call('ZCARD', sids) ~= cnt then
    return {-5}
  end
  if covered and redis.call('EXISTS', sundo) == 0 then
    covered = false -- the undo records were evicted
  end
end

local state -- N's state: "s:<key>" -> JSON value
local create -- N's create-time state (S's), a JSON object
if computed then
  if meta[4] + 0 ~= cinc then
    return {-3}
  end
  create = ARGV[10]
  state = {}
  for j = 1, #cstate, 2 do
    state[cstate[j]] = cstate[j + 1]
  end
else
  -- The point p: the seq of the invocation's first event (from the undo records), or after the last event.
  local p = rev + 1
  local at = {}
  if before ~= '' then
    if not covered then
      return {-7, redis.call('HGET', sundo, 'c') or false}
    end
    local why
    p, why = undo_point(sundo, before)
    if why == 'none' then
      return {-6}
    elseif why then
      return {-7, redis.call('HGET', sundo, 'c') or false}
    end
    -- The state then, as rewind.lua finds it (false: the key did not exist).
    at = undo_walk(sundo, rev, p)
    if not at then
      return {-7, redis.call('HGET', sundo, 'c') or false}
    end
  end
  -- The events before p must all be cached, and the create-time state known.
  create = redis.call('HGET', sundo, 'c')
  if (p > 1 and first > 1) or not create then
    return {-7, create or false}
  end
  local h = redis.call('HGETALL', src)
  state = {}
  for j = 1, #h, 2 do
    if string.sub(h[j], 1, 2) == 's:' then
      state[h[j]] = h[j + 1]
    end
  end
  for k, was in pairs(at) do
    state['s:' .. k] = was or nil
  end
  members, idlist = {}, {}
  if p > 1 then
    local evs = redis.call('ZRANGE', sevents, 0, int(p - 2), 'WITHSCORES')
    local eids = redis.call('ZRANGE', sids, 1, int(p - 1), 'BYSCORE', 'WITHSCORES')
    if #evs ~= 2 * (p - 1) or #eids ~= 2 * (p - 1) then
      return {-5}
    end
    -- Scores come back as doubles: formatted again as integers for the change log.
    for j = 1, #evs, 2 do
      members[j], members[j + 1] = int(evs[j + 1] + 0), evs[j]
      idlist[j], idlist[j + 1] = int(eids[j + 1] + 0), eids[j]
    end
  end
end

-- Every check passed: write N, as create.lua writes a session, with its events as append.lua stores them.
local svals, names = {}, {}
for k in pairs(state) do
  names[#names + 1] = k
end
table.sort(names)
for j = 1, #names do
  svals[2 * j - 1], svals[2 * j] = names[j], state[names[j]]
end
local n = #members / 2
local ut = n > 0 and members[#members - 1] or ct

-- A tombstone (a delete not yet flushed) is replaced by the new incarnation.
redis.call('DEL', sess, events, temp, undo, ids)
-- No m:undo: N's undo records would start after the copied events without their artifact versions, so a
-- rewind of N replays its history (as one of a session read back from the database); c is its create-time state.
redis.call('HSET', sess, 'm:inc', ct, 'm:ct', ct, 'm:ut', ut, 'm:rev', int(n), 'm:first', 1, 'm:cnt', int(n),
  'm:fl', 0, 'm:cid', ARGV[7], 'm:sz', int(state_grow(svals)))
chunked('HSET', sess, svals)
redis.call('HSET', undo, 'c', create)
chunked('ZADD', events, members)
chunked('ZADD', ids, idlist)

redis.call('HSETNX', user, 'm:rev', 0)
redis.call('ZADD', uindex, ut, ARGV[4])
redis.call('ZADD', aindex, 0, ARGV[6])
if durable then
  redis.call('PERSIST', user)
  redis.call('PERSIST', uindex)
  redis.call('HDEL', user, 'm:ttl')
  -- Logged as a create followed by one append per event: the flusher writes N's row and all its events as it
  -- writes any session's. No app or user delta: the events' were applied when S stored them; each append is
  -- marked copied, so that a rebase of the user does not take the events' user: keys for new writes.
  log_change(log, 'c', ct, nil, nil, nil, nil, nil, nil, n > 0 and int(n) or nil)
  for j = 1, n do
    log_change(log, 'a', ct, idlist[2 * j - 1], members[2 * j - 1], nil, nil, nil, nil, '1')
  end
end
return {0}
