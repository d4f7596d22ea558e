-- get.lua: reads a session: meta and state, user state, temp state, and the events of a compacted view (a window's
-- events come from a ZRANGE beside it).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- KEYS[5] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid> (its compaction index, index.lua)
-- ARGV[1] -> invocation id whose temp state to include ("" = none)
-- ARGV[2] -> "1" when a database backs Redis (a missing user hash means evicted or flushed away)
-- ARGV[3] -> "1" for the events of a compacted view; "0" for none: the caller reads a window's events with ZRANGE
--            in the same MULTI (cache.Store.Get; an event passed through Lua costs Redis several times what
--            ZRANGE does: a whole session of 10 000 events 47 ms against 8)
-- ARGV[4] -> for a compacted view, K: the caller reads the newest K events beside the script (ZRANGE events -K -1
--            WITHSCORES, after it in the same MULTI), and the view's events among those are named by runs of seqs
--            (beside), not passed through the script (about 1.4 µs of Redis's time an event of 1 KB); absent: 0
-- Returns {0, session hash (flat), user hash (flat), events (member, score, ... ascending), temp hash (flat),
--         indexed, older, ranges, beside}: indexed = 1 when the events are read from the compaction index (with
--         those the database holds, older = seq, ts, ... and the events of ranges = lo, hi, ... below the cached
--         tail: a superset of the view, within the history, that CompactedView of it turns into the view; see
--         compacted_events), 0 when they are the cached events (the compacted view is taken of the whole
--         history, older and ranges empty); beside = the view's events among the newest K (ARGV[4]), which follow
--         the events returned, as runs of seqs (lo, hi, ...: inclusive, ascending and apart);
--         {-1} not cached, {-2} deleted, {-4} user state not cached, {-5} cache incomplete (evicted keys).
-- Bad arguments are an error reply.
-- Cost: O(log n + k) for n cached events and k returned; a compacted view from the index O(log n + k) for k
-- events of the superset it reads (docs/design.md, "The compacted view").
local sess, events, temp, user, undo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ARGV[3] ~= '1' and ARGV[3] ~= '0' then
  fail('ARGV[3]: ' .. tostring(ARGV[3]) .. ' is neither 1 nor 0')
end
local compacted = ARGV[3] == '1'
local k = ARGV[4] and argv_int(4, 0, MAX_INT) or 0

-- compacted_events reads, from the compaction index of a session (index.lua), a superset of its compacted view
-- within the history: the frontier list's compactions, the events its ranges leave uncovered, the events every
-- view reads (rewinds and the first events they rewind to, compactions that cover nothing, scoped events), each
-- scope's first call, the first event with actions.compaction, ADK JS's last compacted event and the events
-- after its endTime, and for every response those answer the events that call it and the answers to their
-- calls. It returns the events Redis holds (member, score, ... in seq order), the refs of those only the database
-- holds (seq, ts, ...: the events older than the cached tail, which starts at seq first) and the time ranges
-- below the tail whose events are read too (lo, hi, ...: lo < ts < hi, lo "-inf" for no bound), and the seqs of
-- the events from seq from on, which the caller reads beside the script. The caller recovers the calls of the
-- responses of what it reads in those ranges (compacted_calls.lua).
local function compacted_events(events, undo, first, cnt, from)
  local x = redis.call('HMGET', undo, 'xh', 'xj', 'xH', 'xA', 'xt')
  -- Events are at or after the first one's time: a range without a lower bound starts just before it, so one
  -- that ends there (a compaction from the session's start) reads nothing from Redis or the database.
  local oldest = tonumber(x[5]) and tonumber(x[5]) - 1
  local tail = math.huge
  if first > 1 then
    tail = tonumber(redis.call('ZRANGE', events, 0, 0, 'WITHSCORES')[2]) or math.huge
  end
  local ranges = {}
  -- The events of lo < ts < hi (nil: no bound): from Redis, and from the database below the tail. Those Redis
  -- holds are a run of seqs, counted (the events zset holds seqs first to the last, in time order): their members
  -- are read by index_fetch, or beside the script. want holds the events named one by one (seq -> ts, or true),
  -- spans the runs (lo, hi), runs the same ascending and apart (the spans merged).
  local want, spans, runs = {}, {}, {}
  local function take(lo, hi)
    -- No event is at or before oldest; without an upper bound the count is what the lower one leaves of cnt.
    local at = first
    if lo then
      at = first + redis.call('ZCOUNT', events, '-inf', int(lo))
    else
      lo = oldest
    end
    local n
    if hi then
      n = redis.call('ZCOUNT', events, lo and '(' .. int(lo) or '-inf', '(' .. int(hi))
    else
      n = cnt - (at - first)
    end
    if n > 0 then
      spans[#spans + 1] = {at, at + n - 1}
    end
    local top = hi and math.min(hi, tail) or tail
    if top ~= math.huge and (not lo or lo + 1 < top) then
      ranges[#ranges + 1], ranges[#ranges + 2] = lo and int(lo) or '-inf', int(top)
    end
  end
  -- merge turns the spans into runs, and leaves in want only the events outside them.
  local merged = false
  local function merge()
    merged = true
    table.sort(spans, function(a, b) return a[1] < b[1] end)
    for j = 1, #spans do
      run_add(runs, spans[j][1], spans[j][2])
    end
    for q in pairs(want) do
      for j = 1, #runs, 2 do
        if q >= runs[j] and q <= runs[j + 1] then
          want[q] = nil
          break
        end
      end
    end
  end
  if not x[1] and not x[2] then
    take(nil, nil) -- no compaction: the view is the history
  elseif x[2] and string.match(x[2], ' $') then
    take(nil, nil) -- ADK JS's last compaction's endTime does not read: every event
  else
    local function add(ref)
      local q, t = string.match(ref, '^(%d+)/(%d+)$')
      q = tonumber(q)
      if not want[q] then
        want[q] = t
      end
    end
    if x[2] then
      local ref, e = string.match(x[2], '^(%S+) (.*)$')
      add(ref)
      take(tonumber(e), nil)
    end
    -- always: the seqs of the events every view reads, among them every event with a scope (index.lua)
    local n, always = tonumber(x[4]) or 0, {}
    if n > 0 then
      local f = {}
      for j = 1, n do
        f[j] = 'xa' .. int(j)
      end
      local refs = hmget_chunked(undo, f)
      for j = 1, #refs do
        add(refs[j])
        always[j] = index_seq(refs[j])
      end
    end
    if x[1] then
      add(x[1])
      local list, h = {}, x[3]
      while h and h ~= '0' do
        add(h)
        local s, e, l = index_member(undo, h)
        list[#list + 1] = {s, e}
        h = l
      end
      table.sort(list, function(a, b) return a[1] < b[1] end)
      local lo, top = nil, nil
      for j = 1, #list do
        local s, e = list[j][1], list[j][2]
        if not top or s > top then
          take(lo, s)
        end
        if not top or e > top then
          top, lo = e, e
        end
      end
      take(lo, nil)
    end
    merge()
    -- One HMGET reads what the index keeps of the events read: the response ids of those that answer calls (xp,
    -- of the events their buckets xP mark: most answer none) and, with a frontier list, the scopes of those every
    -- view reads (xs: an event with a scope is one of them).
    local seqs = index_answering(undo, seqs_of(want), runs)
    local f = fields_of('xp', seqs)
    local scoped = x[1] and always or {}
    for j = 1, #scoped do
      f[#seqs + j] = 'xs' .. scoped[j]
    end
    local got = hmget_chunked(undo, f)
    local answers = {}
    for j = 1, #seqs do
      answers[j] = got[j]
    end
    if #scoped > 0 then
      -- Each scope's first call with arguments (a scoped agent's first turn comes from it), and the response
      -- ids it answers.
      local more = {}
      for j = 1, #scoped do
        local o = got[#seqs + j] and redis.call('HGET', undo, 'xo' .. got[#seqs + j])
        if o then
          local q = tonumber(index_seq(o))
          local read = want[q]
          for m = 1, #runs, 2 do
            read = read or q >= runs[m] and q <= runs[m + 1]
          end
          if not read then
            more[#more + 1] = q
          end
          add(o)
        end
      end
      local extra = hmget_chunked(undo, fields_of('xp', more))
      for j = 1, #more do
        answers[#seqs + j] = extra[j]
      end
    end
    -- The calls of every response read, and the answers to those calls.
    local ids = {}
    for j = 1, #answers do
      if answers[j] then -- most events answer no call: no call of index_values
        local v = index_values(answers[j])
        for m = 1, #v do
          ids[#ids + 1] = v[m]
        end
      end
    end
    index_calls(undo, ids, add)
  end
  if not merged then
    merge() -- the history read whole (the other branch merges before it looks for answering events)
  end
  local out, older, beside = index_fetch(events, want, first, from, runs)
  return out, older, beside, ranges
end

local h = redis.call('HGETALL', sess)
if #h == 0 then
  return {-1}
end
local meta = redis.call('HMGET', sess, 'm:del', 'm:cnt', 'm:tinv', 'm:first')
if meta[1] == '1' then
  return {-2}
end
if redis.call('ZCARD', events) ~= tonumber(meta[2]) then
  return {-5}
end
if ARGV[2] == '1' and redis.call('EXISTS', user) == 0 then
  return {-4}
end

local ev, indexed, older, ranges, beside = {}, 0, {}, {}, {}
if compacted then
  -- The newest k events are read beside the script: from seq from on.
  local first, cnt = tonumber(meta[4]), tonumber(meta[2])
  local from = math.max(first, first + cnt - k)
  if redis.call('HEXISTS', undo, 'xok') == 1 then
    ev, older, beside, ranges = compacted_events(events, undo, first, cnt, from)
    indexed = 1
  else
    -- No index: the view is taken of the whole history.
    if from > first then
      ev = redis.call('ZRANGE', events, 0, from - first - 1, 'WITHSCORES')
    end
    if from <= first + cnt - 1 then
      beside = {from, first + cnt - 1}
    end
  end
end

local t = {}
if ARGV[1] ~= '' and meta[3] == ARGV[1] then
  t = redis.call('HGETALL', temp)
end
return {0, h, redis.call('HGETALL', user), ev, t, indexed, older, ranges, beside}
