package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// Store runs adksession's scripts against one Redis deployment.
type Store struct {
	rdb     redis.UniversalClient
	keys    Keys
	durable bool
	tempTTL time.Duration
	// appliedRetention is how long app-delta ids are remembered for
	// idempotent re-application.
	appliedRetention time.Duration
	waitReplicas     int
	waitTimeout      time.Duration
	caps             StateCaps
	commit           *committer // group commit of the write scripts
	// bare: the server cannot compile the scripts' shebang lines (see LoadScripts).
	bare atomic.Bool
	// besideHints: how many newest events the last compacted view of a
	// session used, by a hash of its events key (besideCount).
	besideHints [besideHintSlots]atomic.Int32
}

// Options configure a Store.
type Options struct {
	Keys    Keys
	Durable bool // a database backs Redis: log changes, tombstone deletes
	// TempTTL is the TTL of temp: state, the safety net for invocations
	// never ended (service.Config.TempTTL; required for appends with temp:
	// keys: append.lua refuses 0).
	TempTTL time.Duration
	// WaitReplicas > 0: a write is acknowledged only once that many replicas
	// have it (WAIT, in the same round trip), so a failover loses nothing
	// acknowledged. WaitTimeout bounds the wait (service.Config.WaitTimeout;
	// required with WaitReplicas). Like the other options they are the
	// service's, defaulted there: the Store has no defaults of its own.
	WaitReplicas int
	WaitTimeout  time.Duration
	Caps         StateCaps
}

// StateCaps are the caps of the state totals in bytes (each scope's keys
// and JSON values, summed; 0: none): the scripts refuse a write that would
// grow a total past its cap (base.StateCapError).
type StateCaps struct {
	Session, User, App int64
}

// NewStore returns a Store over rdb.
func NewStore(rdb redis.UniversalClient, o Options) *Store {
	return &Store{rdb: rdb, keys: o.Keys, durable: o.Durable, tempTTL: o.TempTTL, appliedRetention: 7 * 24 * time.Hour,
		waitReplicas: o.WaitReplicas, waitTimeout: o.WaitTimeout, caps: o.Caps, commit: &committer{rdb: rdb}}
}

// Client is the underlying Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Keys is the key layout of the store.
func (s *Store) Keys() Keys { return s.keys }

// Durable tells whether a database backs this store.
func (s *Store) Durable() bool { return s.durable }

// Pair is one state key and its JSON-encoded value.
type Pair struct {
	Key   string
	Value string
}

// StateDelta is an event's state delta split by scope. Keys keep no scope
// prefix except Temp, whose keys are whole ("temp:x").
type StateDelta struct {
	Session, User, Temp, App []Pair
	// AppJSON is App as one JSON object (logged for the flusher), "" when empty.
	AppJSON string
	// AppOrder is the order number of App (Store.AppOrder), logged with
	// it; 0 when App is empty.
	AppOrder int64
}

// orderArg is the scripts' argument for d.AppOrder: "" without an app delta.
func orderArg(d StateDelta) string {
	if d.AppJSON == "" {
		return ""
	}
	return strconv.FormatInt(d.AppOrder, 10)
}

func appendPairs(args []any, pairs []Pair) []any {
	args = append(args, len(pairs))
	for _, p := range pairs {
		args = append(args, p.Key, p.Value)
	}
	return args
}

// wakeArg is the scripts' database argument: "" without a database, the
// flusher's wake channel with one.
func (s *Store) wakeArg() string {
	if !s.durable {
		return ""
	}
	return s.keys.Wake()
}

// changeArgs are the first arguments of the scripts that log a change
// (create, append, delete, rewind; lib.lua): wakeArg, then the session's
// app, user and id, with room for n more.
func (s *Store) changeArgs(ref base.SessionRef, n int) []any {
	return append(make([]any, 0, 4+n), s.wakeArg(), ref.App, ref.User, ref.ID)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// CreateArgs are the inputs of Create.
type CreateArgs struct {
	base.SessionRef
	CreateTime int64 // µs; also the incarnation of the id
	// Token names this create call ("": none): if Redis runs the script twice (the
	// client sent it again after losing the reply), the second run finds the
	// session the first created and answers that it was created.
	Token string
	Delta StateDelta
}

// Create creates a session. It returns base.ErrAlreadyExists when the id is taken and
// ErrUserNotCached when the user's state must be loaded first. The app part
// of the initial state is the caller's second step (ApplyApp with
// CreateChangeID), after AppOrder as its first.
func (s *Store) Create(ctx context.Context, a CreateArgs) error {
	k := s.keys.Session(a.App, a.User, a.ID)
	args := append(s.changeArgs(a.SessionRef, 9+2*len(a.Delta.Session)+2*len(a.Delta.User)),
		a.CreateTime, AppIndexMember(a.User, a.ID), a.Delta.AppJSON, a.Token, orderArg(a.Delta))
	args = appendPairs(args, a.Delta.Session)
	args = appendPairs(args, a.Delta.User)
	args = append(args, s.caps.Session, s.caps.User)
	res, err := s.write(ctx, createScript, []string{k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs}, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("create script: %w", err)
	}
	return s.capped(createStatuses.err(res[0]), res[len(res)-1], a.SessionRef)
}

// capped completes a base.StateCapError of a script's status with the scope of a write
// to session ref (ref.User and ref.ID "" for a write to the app's state
// alone), the state's total the script answered with its status (bytes)
// and the cap; other errors are returned as they are.
func (s *Store) capped(err error, bytes int64, ref base.SessionRef) error {
	var c *base.StateCapError
	if !errors.As(err, &c) {
		return err
	}
	c.Bytes = bytes
	switch c.Field {
	case "MaxSessionStateBytes":
		c.Scope, c.Cap = ref.String(), s.caps.Session
	case "MaxUserStateBytes":
		c.Scope, c.Cap = "user "+ref.User+" of app "+ref.App, s.caps.User
	default:
		c.Scope, c.Cap = "app "+ref.App, s.caps.App
	}
	return c
}

// CreateChangeID is the id under which the app part of a create's initial
// state is applied (once).
func CreateChangeID(incarnation int64, user, sid string) string {
	return "c/" + strconv.FormatInt(incarnation, 10) + "/" + Escape(user) + ":" + Escape(sid)
}

// AppendChangeID is the id under which the app part of an event's state
// delta is applied (once): unique across the app's sessions and their
// incarnations, whatever ids the events carry.
func AppendChangeID(incarnation int64, user, sid, eventID string) string {
	return "e/" + strconv.FormatInt(incarnation, 10) + "/" + AppIndexMember(user, sid) + "/" + eventID
}

// AppOrder takes the order number of an app-state change (app_order.lua):
// the first step of a create or an event with app: keys, before the
// session's script logs the change with it (StateDelta.AppOrder). pairs
// are the change's keys and values, checked against the cap of the app's
// state total (a *base.StateCapError, with nothing written); nil for a change
// whose session step is stored already. ErrAppNotCached (the script's -4)
// when Redis lost the app hash with a database behind it: load the app
// state, then take the number again.
func (s *Store) AppOrder(ctx context.Context, app string, pairs []Pair) (int64, error) {
	k := s.keys.App(app)
	args := make([]any, 0, 3+2*len(pairs))
	args = append(args, boolArg(s.durable), s.caps.App, len(pairs))
	for _, p := range pairs {
		args = append(args, p.Key, len(p.Value))
	}
	v, err := s.write(ctx, appOrderScript, []string{k.State, k.Order}, args...).Result()
	if err != nil {
		return 0, fmt.Errorf("app order script: %w", err)
	}
	switch v := v.(type) {
	case int64:
		if err := appOrderStatuses.err(v); err != nil {
			return 0, err
		}
		return v, nil
	case []any:
		if len(v) == 2 {
			code, ok1 := v[0].(int64)
			bytes, ok2 := v[1].(int64)
			if ok1 && ok2 && code < 0 {
				return 0, s.capped(appOrderStatuses.err(code), bytes, base.SessionRef{App: app})
			}
		}
	}
	return 0, fmt.Errorf("app order script: unexpected reply %v", v)
}

// AppChange is the app: part of a create or an event: the second step of
// the write, or the flusher's repair of it.
type AppChange struct {
	ID    string // CreateChangeID or AppendChangeID
	Order int64  // AppOrder's number; 0 for a change logged without one (applied as it comes)
	Pairs []Pair
	// Repair: the flusher does the step of a writer that failed before
	// doing it.
	Repair bool
	// IfSkipped: a retry of an event flushed already applies the change
	// only if the flusher's repair skipped it (ErrAppOrderLost then: take a
	// new number and apply again); otherwise it is a no-op.
	IfSkipped bool
}

// ApplyApp applies an app-state change once per id; applying it again is a
// no-op. Keys a change with a higher order number wrote keep their value.
// ErrAppNotCached (the script's -4) when Redis lost the app hash with a
// database behind it: load the app state, then retry. ErrAppOrderLost when
// Redis lost the order hash since the number was taken: nothing is written
// for a writer (take a new number and apply again); a repair's change is
// skipped and recorded as skipped, so that the writer, or a retry, applies
// it with a new number when it comes (app_apply.lua). It is the second step of a create or an
// event with an app: delta: app state lives in its own hash slot. An empty
// delta is a no-op.
func (s *Store) ApplyApp(ctx context.Context, app string, c AppChange) error {
	if len(c.Pairs) == 0 {
		return nil
	}
	k := s.keys.App(app)
	order, mode := "", ""
	if c.Order > 0 {
		order = strconv.FormatInt(c.Order, 10)
	}
	switch {
	case c.Repair:
		mode = "r"
	case c.IfSkipped:
		mode = "s"
	}
	args := appendPairs([]any{c.ID, time.Now().UnixMilli(), s.appliedRetention.Milliseconds(), boolArg(s.durable), order, mode}, c.Pairs)
	n, err := s.write(ctx, appApplyScript, []string{k.State, k.Applied, k.Order}, args...).Int64()
	if err != nil {
		return fmt.Errorf("app state script: %w", err)
	}
	return appApplyStatuses.err(n)
}

// AppendArgs are the inputs of Append.
type AppendArgs struct {
	base.SessionRef
	// Keys are the session's keys when the caller keeps them (this Store's
	// Keys().Session(App, User, ID)); nil: Append builds them.
	Keys        *SessionKeys
	HandleRev   int64 // last seq the caller's handle has seen
	Incarnation int64 // incarnation of the session the handle was read from
	// NoHandle appends to the session as it is now (HandleRev and
	// Incarnation unused); with IfUpdateTime > 0 only while the session's
	// last update time is that µs (base.ErrStaleSession otherwise).
	NoHandle     bool
	IfUpdateTime int64
	Concurrent   bool // apply even when the handle is behind
	// HandleLastTs is the µs of the handle's last event, 0 when it has none.
	// A handle at the stored revision whose last event is at another time
	// saw another history of the session (an older copy Redis held, since
	// replaced by the database's): it is stale, in both modes.
	HandleLastTs int64
	Ts           int64 // event timestamp µs
	InvocationID string
	EventID      string
	// CheckID: the caller chose EventID and the database was not asked
	// whether the session holds it (see ErrCheckEventID). A store without a
	// database (Options.Durable false) has none to ask, and ignores it.
	CheckID bool
	// EventPre and EventPost are the event's JSON as stored, before and
	// after the value of its top-level "timestamp": the script writes the
	// stored time between them.
	EventPre, EventPost string
	Delta               StateDelta
	// Artifacts are the event's session-scoped artifact versions (file
	// name, version): what a rewind restores.
	Artifacts []Pair
	// Index is the event's entry in the compaction index (append.lua's
	// ARGV[14]; "" when the index needs nothing of it).
	Index string
}

// AppendResult is what Append did.
type AppendResult struct {
	Seq, Ts     int64
	Incarnation int64 // of the session appended to
	// CaughtUp is set when the handle was behind (concurrent mode): the
	// session and user state after this event, and the events it missed.
	CaughtUp *Snapshot
}

// DuplicateEventError is Append's answer when the session already holds an
// event with the event's id: nothing was written. Stored is that event,
// or nil when Redis no longer caches it (it is in the database). Flushed:
// the database has the event too.
type DuplicateEventError struct {
	Stored      *EventRecord
	Incarnation int64 // of the session (0 when the event was found in the database)
	Flushed     bool
}

func (e *DuplicateEventError) Error() string {
	return "adksession: the session holds an event with this id"
}

// Unwrap makes errors.Is(err, ErrDuplicateEvent) hold.
func (e *DuplicateEventError) Unwrap() error { return ErrDuplicateEvent }

// appendCommand is append.lua's KEYS and its evalLine for a (see its
// header for the arguments).
func (s *Store) appendCommand(a AppendArgs) ([]string, []any) {
	k := a.Keys
	if k == nil {
		built := s.keys.Session(a.App, a.User, a.ID)
		k = &built
	}
	keys := []string{k.Session, k.Events, k.Temp, k.User, k.UserIndex, k.Log, k.Undo, k.EventIDs}
	pairs := len(a.Delta.Session) + len(a.Delta.User) + len(a.Delta.Temp) + len(a.Artifacts)
	v := newArgv(keys, 23+2*pairs, 15+2*pairs, 6)
	for _, x := range []string{s.wakeArg(), a.App, a.User, a.ID} {
		v.str(x)
	}
	if a.NoHandle {
		rev := ""
		if a.IfUpdateTime > 0 {
			rev = "=" + strconv.FormatInt(a.IfUpdateTime, 10)
		}
		v.str(rev)
		v.str("")
	} else {
		v.int(a.HandleRev)
		v.int(a.Incarnation)
	}
	switch {
	case !a.Concurrent && !a.NoHandle && a.HandleLastTs > 0:
		v.str("@" + strconv.FormatInt(a.HandleLastTs, 10))
	case !a.Concurrent:
		v.str("")
	case a.HandleLastTs > 0:
		v.str("(" + strconv.FormatInt(a.HandleLastTs, 10))
	default:
		v.str("-inf")
	}
	v.int(a.Ts)
	for _, x := range []string{a.InvocationID, a.EventPre, a.EventPost, a.EventID, boolArg(a.CheckID && s.durable), a.Index} {
		v.str(x)
	}
	// Each scope's pairs, then what applies to them only when there are any:
	// the session's and the user's state caps, the temp hash's TTL.
	for i, pairs := range [][]Pair{a.Delta.Session, a.Delta.User, a.Delta.Temp, a.Artifacts} {
		v.args = append(v.args, len(pairs))
		for _, p := range pairs {
			v.str(p.Key)
			v.str(p.Value)
		}
		if len(pairs) > 0 {
			switch i {
			case 0:
				v.int(s.caps.Session)
			case 1:
				v.int(s.caps.User)
			case 2:
				v.int(s.tempTTL.Milliseconds())
			}
		}
	}
	if a.Delta.AppJSON != "" {
		v.str(a.Delta.AppJSON)
		v.str(orderArg(a.Delta))
	}
	return keys, v.args
}

// argv builds a script's arguments with few allocations: each string or
// int64 put in an interface costs one, so they are kept in two slabs and
// passed by pointer, which go-redis writes as the value pointed to.
type argv struct {
	args []any
	strs []string
	ints []int64
}

// newArgv returns an argv whose args start as the evalLine of a call with
// keys, with room for n arguments after them, of them ns strings and ni
// integers (more still work, at the cost of another slab).
func newArgv(keys []string, n, ns, ni int) *argv {
	return &argv{args: evalHead(keys, n), strs: make([]string, 0, ns), ints: make([]int64, 0, ni)}
}

func (v *argv) str(s string) {
	v.strs = append(v.strs, s)
	v.args = append(v.args, &v.strs[len(v.strs)-1])
}

func (v *argv) int(n int64) {
	v.ints = append(v.ints, n)
	v.args = append(v.args, &v.ints[len(v.ints)-1])
}

// Append appends an event. Errors: ErrNotCached, ErrDeleted, base.ErrStaleSession,
// ErrUserNotCached, ErrIncomplete, *DuplicateEventError, ErrCheckEventID.
// The app part of the delta is not applied here (see ApplyApp).
func (s *Store) Append(ctx context.Context, a AppendArgs) (*AppendResult, error) {
	keys, line := s.appendCommand(a)
	v, err := s.writeLine(ctx, appendScript, keys, line).Slice()
	if err != nil {
		return nil, fmt.Errorf("append script: %w", err)
	}
	code := v[0].(int64)
	switch err := appendStatuses.err(code); {
	case err == ErrDuplicateEvent:
		dup := &DuplicateEventError{Incarnation: v[1].(int64)}
		if len(v) == 5 {
			rec, err := parseMember(v[2].(string), v[3].(string))
			if err != nil {
				return nil, fmt.Errorf("append script: stored event: %w", err)
			}
			dup.Stored, dup.Flushed = &rec, v[4].(int64) == 1
		}
		return nil, dup
	case err == base.ErrStaleSession:
		return nil, fmt.Errorf("%w: stored revision %d, handle %d", err, v[1].(int64), a.HandleRev)
	case err != nil:
		bytes, _ := v[len(v)-1].(int64) // a cap's status: the state's total
		return nil, s.capped(err, bytes, a.SessionRef)
	}
	r := &AppendResult{Seq: v[1].(int64), Ts: v[2].(int64), Incarnation: v[len(v)-1].(int64)}
	if code == codeCaughtUp {
		snap := &Snapshot{}
		if err := snap.parse(v[3], v[4], v[5], nil); err != nil {
			return nil, err
		}
		r.CaughtUp = snap
	}
	return r, nil
}

// Delete deletes a session; it reports whether a cached session was removed.
func (s *Store) Delete(ctx context.Context, ref base.SessionRef) (bool, error) {
	k := s.keys.Session(ref.App, ref.User, ref.ID)
	args := append(s.changeArgs(ref, 2), time.Now().UnixMicro(), AppIndexMember(ref.User, ref.ID))
	res, err := s.write(ctx, deleteScript, []string{k.Session, k.Events, k.Temp, k.UserIndex, k.AppIndex, k.Log, k.Undo, k.EventIDs}, args...).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("delete script: %w", err)
	}
	return res[0] == 1, nil
}

// EndInvocation drops the temp state of invocation inv; it reports whether
// inv owned the session's temp state.
func (s *Store) EndInvocation(ctx context.Context, ref base.SessionRef, inv string) (bool, error) {
	k := s.keys.Session(ref.App, ref.User, ref.ID)
	n, err := s.write(ctx, endInvocationScript, []string{k.Session, k.Temp}, inv).Int64()
	if err != nil {
		return false, fmt.Errorf("end invocation script: %w", err)
	}
	return n == 1, nil
}
