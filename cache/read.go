package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/base/startstop"
)

// EventRecord is a cached event: its sequence number, timestamp (µs, the
// authoritative one) and JSON. ID is its id where the caller knows it
// (events read from the database, to hydrate).
type EventRecord struct {
	Seq, Ts int64
	JSON    string
	ID      string
}

// Snapshot is a session as cached: meta, state by scope, events, temp state.
type Snapshot struct {
	Incarnation    int64
	CreateTime     int64 // µs
	UpdateTime     int64 // µs: the last event's timestamp, or CreateTime
	Rev            int64 // last seq
	First          int64 // seq of the oldest cached event (older ones are in the database only)
	Flushed        int64 // last seq in the database
	Rebase         bool  // m:rb: a flush rebased the copy and kept it (unflushed writes): its next batches are rebased too
	TempInvocation string
	State          map[string]string // session keys -> JSON
	User           map[string]string // user keys without "user:" -> JSON
	UserRev        int64
	App            map[string]string // app keys without "app:" -> JSON
	AppCached      bool              // Redis holds the app's state hash
	Events         []EventRecord     // ascending
	Temp           map[string]string // "temp:x" -> JSON, when asked for its invocation
	// Indexed: Events were read from the compaction index (GetArgs.Compacted):
	// with the events of Older and Ranges (older than the cached tail, in the
	// database only), a superset of the compacted view within the history,
	// which service.CompactedView of them turns into the view. The calls of
	// the responses in the Ranges' events are the caller's to add
	// (CompactedCalls).
	Indexed bool
	Older   []EventRef
	Ranges  []TimeRange
	// Decoded is what its reader's decoder made of Events, when it decoded
	// them on the way (a cold read decodes the events it puts back while
	// the put-back runs: loader.Options.Decode); nil otherwise.
	Decoded any
}

// EventRef is an event the compaction index names: its seq and timestamp
// (µs).
type EventRef struct{ Seq, Ts int64 }

// TimeRange is the events with Lo < timestamp < Hi (µs; Lo = math.MinInt64:
// no lower bound).
type TimeRange struct{ Lo, Hi int64 }

// eventRefs parses (seq, ts, ...) pairs.
func eventRefs(v any) ([]EventRef, error) {
	h, err := flat(v)
	if err != nil {
		return nil, err
	}
	out := make([]EventRef, len(h)/2)
	for i := range out {
		if out[i].Seq, err = strconv.ParseInt(h[2*i], 10, 64); err == nil {
			out[i].Ts, err = strconv.ParseInt(h[2*i+1], 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("script reply: event ref: %w", err)
		}
	}
	return out, nil
}

// timeRanges parses (lo, hi, ...) pairs; lo "-inf" has no bound.
func timeRanges(v any) ([]TimeRange, error) {
	h, err := flat(v)
	if err != nil {
		return nil, err
	}
	out := make([]TimeRange, len(h)/2)
	for i := range out {
		out[i].Lo = math.MinInt64
		if h[2*i] != "-inf" {
			out[i].Lo, err = strconv.ParseInt(h[2*i], 10, 64)
		}
		if err == nil {
			out[i].Hi, err = strconv.ParseInt(h[2*i+1], 10, 64)
		}
		if err != nil {
			return nil, fmt.Errorf("script reply: time range: %w", err)
		}
	}
	return out, nil
}

// CompactedCalls is the second step of a compacted view whose Ranges
// reached below the cached tail: the events that call the response ids
// (those the caller read in the ranges), and the answers to their calls,
// from the compaction index as it was at revision rev of incarnation inc;
// the events Redis holds, and the refs of those the database holds.
// ErrIncomplete: the index is gone (read the view from the whole history).
func (s *Store) CompactedCalls(ctx context.Context, ref base.SessionRef, inc, rev int64, ids []string) ([]EventRecord, []EventRef, error) {
	k := s.keys.Session(ref.App, ref.User, ref.ID)
	args := make([]any, 0, 2+len(ids))
	args = append(args, inc, rev)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := s.run(ctx, compactedCallsScript, []string{k.Session, k.Events, k.Undo}, args...).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("compacted calls script: %w", err)
	}
	if err := compactedCallsStatuses.err(v[0].(int64)); err != nil {
		return nil, nil, err
	}
	recs, err := eventRecords(v[1])
	if err != nil {
		return nil, nil, err
	}
	older, err := eventRefs(v[2])
	return recs, older, err
}

// parse fills s from the replies of get.lua / append.lua.
func (s *Snapshot) parse(sess, user, events, temp any) error {
	h, err := flat(sess)
	if err != nil {
		return err
	}
	s.State = map[string]string{}
	for i := 0; i+1 < len(h); i += 2 {
		f, v := h[i], h[i+1]
		if key, ok := strings.CutPrefix(f, "s:"); ok {
			s.State[key] = v
			continue
		}
		switch f {
		case "m:inc":
			s.Incarnation, err = strconv.ParseInt(v, 10, 64)
		case "m:ct":
			s.CreateTime, err = strconv.ParseInt(v, 10, 64)
		case "m:ut":
			s.UpdateTime, err = strconv.ParseInt(v, 10, 64)
		case "m:rev":
			s.Rev, err = strconv.ParseInt(v, 10, 64)
		case "m:first":
			s.First, err = strconv.ParseInt(v, 10, 64)
		case "m:fl":
			s.Flushed, err = strconv.ParseInt(v, 10, 64)
		case "m:tinv":
			s.TempInvocation = v
		case "m:rb":
			s.Rebase = v == "1"
		}
		if err != nil {
			return fmt.Errorf("session field %s: %w", f, err)
		}
	}
	if s.User, s.UserRev, err = stateHash(user); err != nil {
		return err
	}
	if s.Events, err = eventRecords(events); err != nil {
		return err
	}
	if temp != nil {
		t, err := flat(temp)
		if err != nil {
			return err
		}
		s.Temp = make(map[string]string, len(t)/2)
		for i := 0; i+1 < len(t); i += 2 {
			s.Temp[t[i]] = t[i+1]
		}
	}
	return nil
}

// flat converts a Lua array reply of strings.
func flat(v any) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("script reply: want array, got %T", v)
	}
	out := make([]string, len(arr))
	for i, x := range arr {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("script reply: want string, got %T", x)
		}
		out[i] = s
	}
	return out, nil
}

// stateHash splits a state hash (user or app) into its keys and revision.
func stateHash(v any) (map[string]string, int64, error) {
	var h []string
	switch x := v.(type) {
	case map[string]string:
		m := make(map[string]string, len(x))
		var rev int64
		for f, val := range x {
			if key, ok := strings.CutPrefix(f, "s:"); ok {
				m[key] = val
			} else if f == "m:rev" {
				rev, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		return m, rev, nil
	default:
		var err error
		if h, err = flat(v); err != nil {
			return nil, 0, err
		}
	}
	m := make(map[string]string, len(h)/2)
	var rev int64
	for i := 0; i+1 < len(h); i += 2 {
		if key, ok := strings.CutPrefix(h[i], "s:"); ok {
			m[key] = h[i+1]
		} else if h[i] == "m:rev" {
			rev, _ = strconv.ParseInt(h[i+1], 10, 64)
		}
	}
	return m, rev, nil
}

// eventRecords parses (member, score, ...) pairs; member is "<seq>:<json>".
func eventRecords(v any) ([]EventRecord, error) {
	h, err := flat(v)
	if err != nil {
		return nil, err
	}
	out := make([]EventRecord, 0, len(h)/2)
	for i := 0; i+1 < len(h); i += 2 {
		r, err := parseMember(h[i], h[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func parseMember(member, score string) (EventRecord, error) {
	ts, err := strconv.ParseFloat(score, 64)
	if err != nil {
		return EventRecord{}, fmt.Errorf("event score: %w", err)
	}
	return parseRecord(member, ts)
}

// parseRecord reads an events zset member ("<seq>:<json>") and its score.
func parseRecord(member string, score float64) (EventRecord, error) {
	seq, js, ok := strings.Cut(member, ":")
	if !ok {
		return EventRecord{}, fmt.Errorf("event member without sequence number")
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return EventRecord{}, fmt.Errorf("event sequence number: %w", err)
	}
	return EventRecord{Seq: n, Ts: int64(score), JSON: js}, nil
}

// maxScore is the largest timestamp µs the scripts take: a Lua number holds
// every integer up to 2^53 exactly.
const maxScore = 1<<53 - 1

// GetArgs select what Get reads.
type GetArgs struct {
	base.SessionRef
	After        int64 // keep events with timestamp >= After µs; < 0 = no bound
	NumRecent    int   // keep the newest NumRecent of those; 0 = all
	InvocationID string
	// Compacted reads the events of the compacted view instead of a window
	// (After < 0, NumRecent 0): from the compaction index when Redis holds
	// it and every event (Snapshot.Indexed), else every cached event.
	Compacted bool
}

// Get reads a session, its user and app state and a window of its events in
// one round trip: the session script and, for a window, the events'
// ZRANGE in one MULTI (an event passed through the script costs Redis
// several times what ZRANGE costs), and the app hash. Errors: ErrNotCached,
// ErrDeleted, ErrUserNotCached, ErrIncomplete.
func (s *Store) Get(ctx context.Context, a GetArgs) (*Snapshot, error) {
	g, err := s.newSessionRead(ctx, a)
	if err != nil {
		return nil, err
	}
	script, err := s.txScript(ctx, getScript, g.keys, g.args, func(pipe redis.Pipeliner, call func()) {
		call()
		g.queue(ctx, pipe, !a.Compacted)
	})
	return g.snapshot(script, err, nil)
}

// sessionRead is one read of a session (Get): get.lua's keys and arguments,
// and the commands queued beside it.
type sessionRead struct {
	s      *Store
	a      GetArgs
	keys   []string
	args   []any
	events string // the events zset
	after  string // the window's score bound ("": none)
	window *redis.ZSliceCmd
	beside int              // how many of the newest events a compacted view reads beside get.lua
	newest *redis.ZSliceCmd // those events
	app    *redis.MapStringStringCmd
	// appRead brings the app hash read beside the MULTI in a cluster, where
	// it has a slot of its own (on one server it is in the MULTI: app).
	appRead chan *redis.MapStringStringCmd
}

// newSessionRead checks a and starts its read: in a cluster, the app
// hash's.
func (s *Store) newSessionRead(ctx context.Context, a GetArgs) (*sessionRead, error) {
	if a.NumRecent < 0 {
		return nil, fmt.Errorf("get %s: NumRecent %d is negative", a.String(), a.NumRecent)
	}
	k := s.keys.Session(a.App, a.User, a.ID)
	g := &sessionRead{s: s, a: a, events: k.Events,
		keys: []string{k.Session, k.Events, k.Temp, k.User, k.Undo},
		args: []any{a.InvocationID, boolArg(s.durable), boolArg(a.Compacted)},
	}
	if a.Compacted {
		g.beside = s.besideCount(k.Events)
		g.args = append(g.args, g.beside)
	}
	if a.After >= 0 {
		// Stored timestamps are below 2^53 µs (the scripts refuse others).
		g.after = strconv.FormatInt(min(a.After, maxScore), 10)
	}
	if !s.oneServer() {
		g.appRead = make(chan *redis.MapStringStringCmd, 1)
		go func() { g.appRead <- s.rdb.HGetAll(ctx, s.keys.App(a.App).State) }()
	}
	return g, nil
}

// queue adds to pipe, after get.lua, the window's ZRANGE (when window is
// true), a compacted view's ZRANGE of the newest events and, on one
// server, the app hash.
func (g *sessionRead) queue(ctx context.Context, pipe redis.Pipeliner, window bool) {
	if window {
		g.window = pipe.ZRangeArgsWithScores(ctx, windowRange(g.events, g.after, g.a.NumRecent))
	}
	if g.a.Compacted {
		g.newest = pipe.ZRangeWithScores(ctx, g.events, int64(-g.beside), -1)
	}
	if g.appRead == nil {
		g.app = pipe.HGetAll(ctx, g.s.keys.App(g.a.App).State)
	}
}

// snapshot is the read's answer: get.lua's reply script (err: the MULTI's
// error), with the window's events from its ZRANGE, or events when none was
// queued.
func (g *sessionRead) snapshot(script *redis.Cmd, err error, events []EventRecord) (*Snapshot, error) {
	if g.appRead != nil {
		g.app = <-g.appRead
	}
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("get script: %w", err)
	}
	if err := g.app.Err(); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("get app state: %w", err)
	}
	v, err := script.Slice()
	if err != nil {
		return nil, fmt.Errorf("get script: %w", err)
	}
	if err := getStatuses.err(v[0].(int64)); err != nil {
		return nil, err
	}
	snap := &Snapshot{}
	if err := snap.parse(v[1], v[2], v[3], v[4]); err != nil {
		return nil, err
	}
	switch {
	case g.window != nil:
		if snap.Events, err = windowRecords(g.window.Val(), g.after != "" && g.a.NumRecent > 0); err != nil {
			return nil, err
		}
	case !g.a.Compacted:
		snap.Events = events
	}
	if g.a.Compacted {
		if snap.Events, err = withBeside(snap.Events, v[8], g.newest); err != nil {
			return nil, err
		}
		g.s.besideUsed(g.events, snap.Events, snap.Rev)
	}
	if snap.Indexed = v[5].(int64) == 1; snap.Indexed {
		if snap.Older, err = eventRefs(v[6]); err != nil {
			return nil, err
		}
		if snap.Ranges, err = timeRanges(v[7]); err != nil {
			return nil, err
		}
	}
	if snap.App, _, err = stateHash(g.app.Val()); err != nil {
		return nil, err
	}
	snap.AppCached = len(g.app.Val()) > 0
	return snap, nil
}

// viewBeside is how many of a session's newest events a compacted view
// reads beside get.lua, in its MULTI: the view's events among them are not
// passed through the script, which get.lua names by seq (an event passed
// through Lua costs Redis about 1.4 µs a KB, a ZRANGE of it a fraction).
// A view whose events all are among them (its last compaction's range
// ends fewer than viewBeside events before the newest) passes none.
const viewBeside = 32

// besideHintSlots is the size of Store.besideHints; besideSlack the events a
// session may take between two compacted views of it.
const (
	besideHintSlots = 4096
	besideSlack     = 4
)

// besideCount is how many of the newest events of a session (its events
// key) a compacted view reads beside get.lua: as many as the last view of
// it used, and besideSlack more, up to viewBeside; viewBeside when no view
// of it is remembered. A wrong hint (another session's in the same slot)
// costs time only: what the view needs beyond the count passes through the
// script.
func (s *Store) besideCount(events string) int {
	if h := int(s.besideHints[hintSlot(events)].Load()); h > 0 {
		return min(viewBeside, h+besideSlack)
	}
	return viewBeside
}

// besideUsed remembers how many newest events a view of a session used:
// the run of consecutive seqs that ends at rev among evs (ascending).
func (s *Store) besideUsed(events string, evs []EventRecord, rev int64) {
	n := 0
	for i := len(evs) - 1; i >= 0 && evs[i].Seq == rev-int64(n); i-- {
		n++
	}
	s.besideHints[hintSlot(events)].Store(int32(max(n, 1)))
}

// hintSlot is the slot of a key in Store.besideHints: FNV-1a of it.
func hintSlot(key string) int {
	return int(fnv1a(fnvOffset, key) % besideHintSlots)
}

// withBeside appends to events (get.lua's, older than the newest
// viewBeside) those named in runs (get.lua's beside: runs of seqs, lo, hi,
// ... inclusive, ascending and apart) from the newest events read beside
// the script, which hold them in seq order.
func withBeside(events []EventRecord, runs any, newest *redis.ZSliceCmd) ([]EventRecord, error) {
	bounds, want, err := besideRuns(runs)
	if err != nil || want == 0 {
		return events, err
	}
	if err := newest.Err(); err != nil {
		return nil, fmt.Errorf("get the newest events: %w", err)
	}
	read, err := windowRecords(newest.Val(), false)
	if err != nil {
		return nil, err
	}
	var got int64
	j := 0
	for _, r := range read {
		for j < len(bounds) && r.Seq > bounds[j+1] {
			j += 2
		}
		if j == len(bounds) {
			break
		}
		if r.Seq >= bounds[j] {
			events = append(events, r)
			got++
		}
	}
	if got != want {
		return nil, fmt.Errorf("get script: %d of the %d events named beside are among the newest %d read", got, want, len(read))
	}
	return events, nil
}

// besideRuns reads get.lua's beside reply: the runs as lo, hi, ... and how
// many seqs they name.
func besideRuns(runs any) (bounds []int64, n int64, err error) {
	list, ok := runs.([]any)
	if !ok || len(list)%2 != 0 {
		return nil, 0, fmt.Errorf("get script: beside: want a list of runs, got %T of %d", runs, len(list))
	}
	bounds = make([]int64, len(list))
	for i, v := range list {
		q, ok := v.(int64)
		switch {
		case !ok:
		case i%2 == 1 && q < bounds[i-1]: // a run that ends before it starts
		case i%2 == 0 && i > 0 && q <= bounds[i-1]+1: // a run not after the one before, apart
		default:
			bounds[i] = q
			if i%2 == 1 {
				n += q - bounds[i-1] + 1
			}
			continue
		}
		return nil, 0, fmt.Errorf("get script: beside: want runs of seqs, ascending and apart, got %v", list)
	}
	return bounds, n, nil
}

// WindowOf is the window of a (GetArgs.After, then NumRecent) of evs, a
// session's cached events in ascending order: what windowRange reads of a
// zset that holds them.
func WindowOf(evs []EventRecord, a GetArgs) []EventRecord {
	lo := 0
	if a.After >= 0 {
		after := min(a.After, maxScore)
		lo = sort.Search(len(evs), func(i int) bool { return evs[i].Ts >= after })
	}
	if a.NumRecent > 0 && len(evs)-lo > a.NumRecent {
		lo = len(evs) - a.NumRecent
	}
	return evs[lo:]
}

// txScript runs one call of sc in a MULTI with the commands queue adds
// around it (it calls call where the script goes): EVALSHA, and EVAL when
// the server does not know the script. In a cluster, a MULTI that got no
// reply is sent again after a wait: go-redis sends a cluster's MULTI again
// to the node it chose first, unlike a pipeline, which it maps again by the
// slot map followFailovers reloads, so a dead master in the map would fail
// every attempt (TestDeadMasterInSlotMap); the next Exec maps the slot
// anew. The MULTIs sent this way (a read, a put-back that checks what Redis
// holds) may run twice.
func (s *Store) txScript(ctx context.Context, sc *script, keys []string, args []any, queue func(pipe redis.Pipeliner, call func())) (*redis.Cmd, error) {
	var cmd *redis.Cmd
	for eval, retries := false, 0; ; {
		pipe := s.rdb.TxPipeline()
		queue(pipe, func() {
			if eval {
				cmd = s.pick(sc).Eval(ctx, pipe, keys, args...)
			} else {
				cmd = s.pick(sc).EvalSha(ctx, pipe, keys, args...)
			}
		})
		_, err := pipe.Exec(ctx)
		if !eval && isNoScript(cmd.Err()) {
			eval = true
			continue
		}
		if err != nil && !s.oneServer() && retries < len(txRetryBackoff) && noReply(ctx, err) &&
			startstop.Wait(ctx, txRetryBackoff[retries]) {
			retries++
			continue
		}
		return fullError(cmd), err
	}
}

// oneServer tells whether the client talks to one Redis (not a cluster).
func (s *Store) oneServer() bool {
	_, ok := s.rdb.(*redis.Client)
	return ok
}

// txRetryBackoff are the waits before a cluster transaction that got no
// reply is sent again (the slot map reloads meanwhile: followFailovers).
var txRetryBackoff = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond}

// noReply tells whether err is a call's failure to get any reply (a
// connection refused, reset or timed out), not a Redis error reply nor the
// end of ctx.
func noReply(ctx context.Context, err error) bool {
	var reply redis.Error
	return ctx.Err() == nil && !errors.As(err, &reply) && !errors.Is(err, redis.ErrClosed)
}

// windowRange is the ZRANGE of a window's events: every event, the newest
// n, those at or after a time (after: µs, "" for no bound), or the newest n
// of those (newest first: windowRecords turns them).
func windowRange(events, after string, n int) redis.ZRangeArgs {
	switch {
	case after == "" && n == 0:
		return redis.ZRangeArgs{Key: events, Start: 0, Stop: -1}
	case after == "":
		return redis.ZRangeArgs{Key: events, Start: -n, Stop: -1}
	case n == 0:
		return redis.ZRangeArgs{Key: events, Start: after, Stop: "+inf", ByScore: true}
	default:
		return redis.ZRangeArgs{Key: events, Start: "+inf", Stop: after, ByScore: true, Rev: true, Count: int64(n)}
	}
}

// windowRecords parses a window's events (newest first: reversed into
// append order).
func windowRecords(zs []redis.Z, newestFirst bool) ([]EventRecord, error) {
	out := make([]EventRecord, len(zs))
	for i, z := range zs {
		member, ok := z.Member.(string)
		if !ok {
			return nil, fmt.Errorf("event member: want a string, got %T", z.Member)
		}
		r, err := parseRecord(member, z.Score)
		if err != nil {
			return nil, err
		}
		if newestFirst {
			out[len(zs)-1-i] = r
		} else {
			out[i] = r
		}
	}
	return out, nil
}

// AppState reads an app's state (keys without "app:").
func (s *Store) AppState(ctx context.Context, app string) (map[string]string, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.App(app).State).Result()
	if err != nil {
		return nil, fmt.Errorf("read app state: %w", err)
	}
	m, _, err := stateHash(h)
	return m, err
}

// UserState reads a user's state (keys without "user:"); ok is false when
// Redis holds no state hash for that user.
func (s *Store) UserState(ctx context.Context, app, user string) (m map[string]string, ok bool, err error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Session(app, user, "").User).Result()
	if err != nil {
		return nil, false, fmt.Errorf("read user state: %w", err)
	}
	m, _, err = stateHash(h)
	return m, len(h) > 0, err
}

// IndexedEvent is what the compaction index takes of one event of a
// history (BuildIndex).
type IndexedEvent struct {
	Ts           int64 // µs, as Redis holds it
	InvocationID string
	Entry        string // its index entry (append.lua's ARGV[14])
}

// indexBuildChunk is the number of events one index_build.lua call takes.
const indexBuildChunk = 1000

// BuildIndex builds the compaction index of a session whose Redis copy
// lacks it, from its whole history (events: seqs 1 to rev, of incarnation
// inc), a chunk per call. ErrIncomplete: the session moved on meanwhile
// (the next compacted read builds it again).
func (s *Store) BuildIndex(ctx context.Context, ref base.SessionRef, inc, rev int64, events []IndexedEvent) error {
	if int64(len(events)) != rev || rev == 0 {
		return fmt.Errorf("build the compaction index: %d events for revision %d", len(events), rev)
	}
	k := s.keys.Session(ref.App, ref.User, ref.ID)
	for from := 0; from < len(events); from += indexBuildChunk {
		chunk := events[from:min(from+indexBuildChunk, len(events))]
		args := make([]any, 0, 3+3*len(chunk))
		args = append(args, inc, rev, from+1)
		for _, e := range chunk {
			args = append(args, e.Ts, e.InvocationID, e.Entry)
		}
		v, err := s.write(ctx, indexBuildScript, []string{k.Session, k.Undo}, args...).Slice()
		if err != nil {
			return fmt.Errorf("index build script: %w", err)
		}
		if err := indexBuildStatuses.err(v[0].(int64)); err != nil {
			return err
		}
	}
	return nil
}
