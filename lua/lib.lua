-- lib.lua: helpers package lua puts in front of the scripts that use them (after a shebang line, if any).
--
-- Redis does not roll back a script that fails midway, so every script reads and checks all of its inputs
-- and preconditions first (argv_int, argv_pairs raise an error reply before anything is written), then
-- writes. Lua's unpack takes at most about 8 000 values: commands with an unbounded number of arguments
-- go through chunked / hmget_chunked, never one unpack of the whole list.

-- CHUNK is the most arguments one chunked command call takes (even, so pairs stay together).
local CHUNK = 1000

-- unexpire makes a session's keys (hash, events, event ids, undo records) persistent again and clears the
-- session's m:ttl flag: an unflushed write is about to land in keys the flusher gave a TTL.
local function unexpire(sess, events, ids, undo)
  redis.call('PERSIST', sess)
  redis.call('PERSIST', events)
  redis.call('PERSIST', ids)
  redis.call('PERSIST', undo)
  redis.call('HDEL', sess, 'm:ttl')
end

-- guard_moved tells whether a cold read's guard (docs/design.md, "Cold reads") moved since the read began: the
-- read guards hash no longer holds gen, "<the field's counter>@<the hash's epoch>" ("" for one absent). The
-- database may then hold newer data than the read, and what the read would put back into Redis is outdated. A
-- FLUSHALL (or an eviction of the hash) drops the epoch, which the next read sets anew: a counter that starts
-- again from absent is not taken for the one the read saw.
local function guard_moved(guards, field, gen)
  local v = redis.call('HMGET', guards, field, 'epoch')
  return (v[1] or '') .. '@' .. (v[2] or '') ~= gen
end

-- fail raises an error reply naming the script's bad input; nothing has been written when it is called.
local function fail(msg)
  error({err = 'ERR adksession: ' .. msg})
end

-- argv_int reads ARGV[i] as an integer in [lo, hi].
local function argv_int(i, lo, hi)
  local n = tonumber(ARGV[i])
  if n == nil or n % 1 ~= 0 or n < lo or n > hi then
    fail('ARGV[' .. i .. ']: ' .. tostring(ARGV[i]) .. ' is not an integer in [' ..
      string.format('%d', lo) .. ', ' .. string.format('%d', hi) .. ']')
  end
  return n
end

-- MAX_INT is the largest integer a Lua number holds exactly (2^53).
local MAX_INT = 9007199254740992

-- argv_pairs reads ARGV[i] = n, then n pairs: it returns the 2n values as a list (each first one with
-- prefix put in front), n, and the index after the pairs.
local function argv_pairs(i, prefix)
  -- The commonest counts without a call: every function call costs Redis about as much as a light command.
  local c = ARGV[i]
  local n = (c == '0' and 0) or (c == '1' and 1) or argv_int(i, 0, MAX_INT)
  if i + 2 * n > #ARGV then
    fail('ARGV[' .. i .. ']: ' .. n .. ' pairs, but only ' .. (#ARGV - i) .. ' arguments follow')
  end
  local out = {}
  for j = 1, n do
    out[2 * j - 1] = prefix .. ARGV[i + 2 * j - 1]
    out[2 * j] = ARGV[i + 2 * j]
  end
  return out, n, i + 1 + 2 * n
end

-- pairs_object returns the first n pairs of vals (as argv_pairs returns them: each key after a prefix of cut
-- bytes, each value JSON) as one JSON object: a change-log entry's user delta.
local function pairs_object(vals, n, cut)
  local parts = {}
  for j = 1, n do
    parts[j] = cjson.encode(string.sub(vals[2 * j - 1], cut + 1)) .. ':' .. vals[2 * j]
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- chunked runs cmd key args... over list, CHUNK arguments per call (HSET, ZADD, HDEL, ZREM, ...).
local function chunked(cmd, key, list)
  if #list == 0 then
    return
  elseif #list <= CHUNK then
    redis.call(cmd, key, unpack(list))
    return
  end
  for lo = 1, #list, CHUNK do
    redis.call(cmd, key, unpack(list, lo, math.min(lo + CHUNK - 1, #list)))
  end
end

-- hmget_chunked reads many fields of a hash.
local function hmget_chunked(key, fields)
  if #fields == 0 then
    return {}
  elseif #fields <= CHUNK then
    return redis.call('HMGET', key, unpack(fields))
  end
  local out = {}
  for lo = 1, #fields, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, lo, math.min(lo + CHUNK - 1, #fields)))
    for j = 1, #part do
      out[#out + 1] = part[j]
    end
  end
  return out
end

-- int formats an integer for Redis: as digits, never in exponent notation.
local function int(n)
  return string.format('%d', n)
end

-- An undo record (field <seq> of a session's undo hash) says what undoes one event, with the previous values
-- raw (no JSON escaping): entries one after another, each a letter, a length in bytes, ':' and the bytes.
--   i<n>:<invocation>   the event is the first of this invocation
--   s<n>:<key>          a session key the event set, followed by =<n>:<previous JSON value>, or - (none)
--   a<n>:<file>         an artifact the event named, followed by =<n>:<previous version>, or - (none)
--   x0:                 the previous values were not kept (bigger than the event itself): a rewind to before
--                       this event replays the history instead
-- undo_put adds one entry to a list of parts; undo_read decodes a record into {i =, x =, s = {key, prev or
-- false, ...}, a = {file, prev or false, ...}}.
local function undo_put(parts, tag, v)
  parts[#parts + 1] = tag .. #v .. ':' .. v
end

local function undo_read(rec)
  local r, pos = {s = {}, a = {}}, 1
  local function take()
    local colon = string.find(rec, ':', pos + 1, true)
    local tag, n = string.sub(rec, pos, pos), tonumber(string.sub(rec, pos + 1, colon - 1))
    local v = string.sub(rec, colon + 1, colon + n)
    pos = colon + n + 1
    return tag, v
  end
  while pos <= #rec do
    local tag, v = take()
    if tag == 'i' then
      r.i = v
    elseif tag == 'x' then
      r.x = true
    else
      local prev = false
      if string.sub(rec, pos, pos) == '=' then
        local _, p = take()
        prev = p
      else
        pos = pos + 1
      end
      local list = r[tag]
      list[#list + 1], list[#list + 2] = v, prev
    end
  end
  return r
end

-- undo_point returns the seq of the first event of invocation inv, from a session's undo records (undo, the hash
-- of a session they cover: m:undo); or nil and why not: 'none' when the records cover the session from its first
-- event and inv has no event, 'short' when they do not reach that far (rewind.lua and fork.lua then replay the
-- history instead).
local function undo_point(undo, inv)
  local u = redis.call('HMGET', undo, 'm:from', 'i:' .. inv)
  if not u[1] then
    return nil, 'short'
  end
  local from, p = u[1] + 0, u[2]
  if not p then
    if from == 1 then
      return nil, 'none'
    end
    return nil, 'short'
  end
  p = p + 0
  if p < from then
    return nil, 'short'
  end
  return p
end

-- undo_walk reads the undo records of the events rev down to p and returns what each session key and artifact
-- the events set had just before p: at[key] and atf[file], the previous JSON value or version (false: none).
-- Walking back from the newest event, the oldest previous value of a key is its value then. It returns nil when
-- an event of them did not keep its previous values (x: replay the history instead).
local function undo_walk(undo, rev, p)
  local at, atf = {}, {}
  local seqs = {}
  for q = rev, p, -1 do
    seqs[#seqs + 1] = int(q)
  end
  local recs = hmget_chunked(undo, seqs)
  for j = 1, #seqs do
    if recs[j] then
      local r = undo_read(recs[j])
      if r.x then
        return nil
      end
      for n = 1, #r.s, 2 do
        at[r.s[n]] = r.s[n + 1]
      end
      for n = 1, #r.a, 2 do
        atf[r.a[n]] = r.a[n + 1]
      end
    end
  end
  return at, atf
end

-- State totals (docs/design.md, "State totals"): m:sz of a session, user or app hash is the bytes of its
-- state, each key (without its scope's prefix) plus its JSON value. The scripts that write state keep it in
-- step; the ones that take new state refuse, before their first write, a write that would grow a total past
-- its cap (Config.MaxSessionStateBytes, MaxUserStateBytes, MaxAppStateBytes).

-- state_total returns a state hash's total: m:sz, or counted from its fields when it has none (a hash
-- hydrate.lua put back, or one written before totals were kept; the next write that changes it stores it).
-- stored is m:sz as the caller read it (false: the hash has none), nil when the caller did not read it.
local function state_total(hash, stored)
  if stored == nil then
    stored = redis.call('HGET', hash, 'm:sz')
  end
  if stored then
    return stored + 0
  end
  local h, n = redis.call('HGETALL', hash), 0
  for j = 1, #h, 2 do
    if string.sub(h[j], 1, 2) == 's:' then
      n = n + #h[j] - 2 + #h[j + 1]
    end
  end
  return n
end

-- value_lens returns the byte lengths of a hash's values of the fields of pairs (field, value, ...): 0 for a
-- field it lacks (a JSON value is never empty).
local function value_lens(hash, pairs)
  local out = {}
  for j = 1, #pairs, 2 do
    out[#out + 1] = redis.call('HSTRLEN', hash, pairs[j])
  end
  return out
end

-- state_grow returns what writing pairs (field "s:<key>", JSON value, ...; sized: the value's byte length
-- instead) over values of olds[j] bytes (0: a key the state lacks; olds nil: into an empty state) adds to a
-- total (negative: it shrinks).
local function state_grow(pairs, olds, sized)
  local d = 0
  for j = 1, #pairs / 2 do
    local o, v = olds and olds[j] or 0, pairs[2 * j]
    d = d + (sized and v or #v) - o
    if o == 0 then
      d = d + #pairs[2 * j - 1] - 2
    end
  end
  return d
end

-- state_over tells whether a write that takes a total from before to after passes cap (0: no cap). A write
-- that does not grow a state is never refused: a state above a cap lowered since can shrink.
local function state_over(before, after, cap)
  return cap > 0 and after > cap and after > before
end

-- state_write returns a state hash's total once pairs are written over its values (of olds[j] bytes; nil:
-- read with value_lens), and whether that passes cap (state_over). sized as for state_grow, stored as for
-- state_total.
local function state_write(hash, pairs, cap, olds, sized, stored)
  local before = state_total(hash, stored)
  local after = before + state_grow(pairs, olds or value_lens(hash, pairs), sized)
  return after, state_over(before, after, cap)
end

-- The scripts that log a change (create, append, delete, rewind) share their first arguments:
--   ARGV[1] -> "" without a database; with one, the flusher's wake channel: write the change log (log_change)
--   ARGV[2], ARGV[3], ARGV[4] -> app name, user id, session id (raw: the change log's fields, the user index member)

-- log_change writes the change-log entry the flusher reads (cache/changelog.go) for the session of ARGV[2..4]:
-- kind ('c' create, 'a' append, 'd' delete) at incarnation inc; for an event its seq and time (nil for a
-- create or a delete); an app delta with its order number (nil: none); for an event with an app delta or
-- user: keys, its id (the flusher tells by it whether the database holds the event, whose seq and time an
-- older copy may share with another); the write's user: keys as one JSON object (udelta, nil: none;
-- pairs_object), for the flusher's rebase of a user Redis holds behind the database; copied (field x): for an event, 1: a copy (fork.lua) whose user: keys are no
-- write of its own; for a create, the number of such copies the new session starts with. It wakes the flusher (PUBLISH on ARGV[1]) when the log was empty. Called only with a database
-- (ARGV[1] ~= '').
local function log_change(log, kind, inc, seq, ts, delta, order, id, udelta, copied)
  if udelta or copied then
    local entry = {'k', kind, 'a', ARGV[2], 'u', ARGV[3], 'i', ARGV[4], 'n', inc}
    if seq then
      entry[11], entry[12], entry[13], entry[14] = 'q', seq, 't', ts
    end
    if delta then
      entry[#entry + 1], entry[#entry + 2], entry[#entry + 3], entry[#entry + 4] = 'p', delta, 'o', order
    end
    if id then
      entry[#entry + 1], entry[#entry + 2] = 'e', id
    end
    if udelta then
      entry[#entry + 1], entry[#entry + 2] = 'w', udelta
    end
    if copied then
      entry[#entry + 1], entry[#entry + 2] = 'x', copied
    end
    redis.call('XADD', log, '*', unpack(entry))
  elseif not seq then
    if delta then
      redis.call('XADD', log, '*', 'k', kind, 'a', ARGV[2], 'u', ARGV[3], 'i', ARGV[4], 'n', inc, 'p', delta, 'o', order)
    else
      redis.call('XADD', log, '*', 'k', kind, 'a', ARGV[2], 'u', ARGV[3], 'i', ARGV[4], 'n', inc)
    end
  elseif delta then
    redis.call('XADD', log, '*', 'k', kind, 'a', ARGV[2], 'u', ARGV[3], 'i', ARGV[4], 'n', inc, 'q', seq, 't', ts,
      'p', delta, 'o', order, 'e', id)
  else
    redis.call('XADD', log, '*', 'k', kind, 'a', ARGV[2], 'u', ARGV[3], 'i', ARGV[4], 'n', inc, 'q', seq, 't', ts)
  end
  if redis.call('XLEN', log) == 1 then
    redis.call('PUBLISH', ARGV[1], 1)
  end
end

-- new_session_check tells whether the session of ARGV[4] may be made (create.lua, fork.lua): nil when it may;
-- 'mine' when the session exists, made by this very call (token, its m:cid: a run again after a lost reply);
-- 'taken' when it exists (in Redis, or, with a database, in the user's complete index: Redis may have evicted a
-- flushed session the database holds); 'load' when, with a database, the user's state or complete index is not
-- cached (load them, then run again). A tombstone (a delete not yet flushed) does not take the id. The index
-- check is here, in the one atomic step, as the session may be flushed and evicted after any check made before.
local function new_session_check(sess, user, uindex, token, durable)
  if redis.call('EXISTS', sess) == 1 then
    local meta = redis.call('HMGET', sess, 'm:del', 'm:cid')
    if meta[1] ~= '1' then
      if token ~= '' and meta[2] == token then
        return 'mine'
      end
      return 'taken'
    end
  end
  if durable then
    if redis.call('EXISTS', user) == 0 or not redis.call('ZSCORE', uindex, '') then
      return 'load'
    end
    if redis.call('ZSCORE', uindex, ARGV[4]) then
      return 'taken'
    end
  end
  return nil
end

-- store_event stores the next event of a session (append.lua, rewind.lua), once every check passed: the
-- session hash's meta and the caller's fields in one HSET, the event in the events zset and its id in the
-- event ids zset, the session in the user index; the temp hash goes when the event starts another invocation;
-- with a database the session's keys lose their TTL (unexpire).
--   sess, events, temp, uindex, ids, undo: the session's keys
--   m: the session as read: {rev =, ut =, cnt = (numbers), tinv = m:tinv, ttl = m:ttl is 1, undo = m:undo is 1,
--      covered = the undo hash still covers the session (false once it was evicted)}
--   seqs: its seq (m.rev + 1) formatted; ts0: the event's time in µs (moved to the previous event's + 1 when not after it); inv: its invocation;
--   pre, post: its JSON before and after the value of its "timestamp" (the stored time goes between them);
--   id: its id, nil when the caller indexed it already; fields: more session hash fields (field, value, ...)
-- Returns seq, ts, ts formatted, and the stored time (the JSON's "timestamp" value).
local function store_event(sess, events, temp, uindex, ids, undo, m, seqs, ts0, inv, pre, post, id, fields)
  local ts = ts0
  if m.rev > 0 and ts <= m.ut then
    ts = m.ut + 1
  end
  -- Each number formatted once; the stored time is the µs with a decimal point before the last six digits.
  local tss = int(ts)
  local stamp
  if ts >= 1000000 then
    stamp = string.sub(tss, 1, -7) .. '.' .. string.sub(tss, -6)
  else
    stamp = string.format('0.%06d', ts)
  end
  local set = {'m:rev', seqs, 'm:ut', tss, 'm:cnt', int(m.cnt + 1)}
  if m.tinv ~= inv then
    -- The first event of another invocation ends the previous one's temp state.
    redis.call('DEL', temp)
    set[7], set[8] = 'm:tinv', inv
  end
  if m.covered ~= m.undo then
    redis.call('HDEL', sess, 'm:undo')
  end
  for j = 1, #fields do
    set[#set + 1] = fields[j]
  end
  chunked('HSET', sess, set)
  redis.call('ZADD', events, tss, seqs .. ':' .. pre .. stamp .. post)
  if id then
    redis.call('ZADD', ids, seqs, id)
  end
  redis.call('ZADD', uindex, tss, ARGV[4])
  if m.ttl and ARGV[1] ~= '' then
    unexpire(sess, events, ids, undo)
  end
  return m.rev + 1, ts, tss, stamp
end
