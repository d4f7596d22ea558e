package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// FlushRef names a session whose changes are being flushed, and what of it.
type FlushRef struct {
	base.SessionRef
	Incarnation  int64
	MinTs, MaxTs int64 // timestamp range of the events to read (MinTs > MaxTs: none)
	// Create: the batch holds this incarnation's create; read its
	// create-time state.
	Create bool
}

// FlushRead is what the flusher reads of one session. Reading one session
// never fails because of another: what cannot be read is reported in Err
// and BadEvents.
type FlushRead struct {
	Snap *Snapshot // nil when the session is gone or re-created (another incarnation), or with Err
	// Err: the session's meta fields cannot be read (poison written by a
	// bug or an older version); nothing of the session can be written.
	Err       error
	Events    []EventRecord // the events of the ref's range that could be read
	BadEvents []BadEvent    // the ones that could not
	// User is the session's user state.
	User StateRev
	// CreateState is the create-time session state (a JSON object) when the
	// ref asked for it and Redis holds it, else "".
	CreateState string
}

// BadEvent is a cached event the flusher cannot read.
type BadEvent struct {
	Member string // as stored: "<seq>:<event JSON>"
	Ts     int64  // its score, µs
	Err    error
}

// ReadForFlush reads, in one pipeline, the current meta and state of each
// session, its user state and the events in the range of each ref. Each
// user's hash is read once, for the user's first ref, and the others share
// that read: every read counts (m:fc, state_read.lua), and the database
// must record every count Redis takes, or a copy Redis comes back with
// from between two counts would not be found older (docs/design.md,
// "Redis behind the database").
func (s *Store) ReadForFlush(ctx context.Context, refs []FlushRef) ([]FlushRead, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	sess := make([]*redis.MapStringStringCmd, len(refs))
	users := make([]*redis.Cmd, len(refs))
	evs := make([]*redis.ZSliceCmd, len(refs))
	creates := make([]*redis.StringCmd, len(refs))
	sc := s.pick(stateReadScript)
	run := func(eval func(redis.Pipeliner, []string) *redis.Cmd) error {
		pipe := s.rdb.Pipeline()
		read := map[string]*redis.Cmd{} // by user hash key
		for i, r := range refs {
			k := s.keys.Session(r.App, r.User, r.ID)
			sess[i] = pipe.HGetAll(ctx, k.Session)
			if users[i] = read[k.User]; users[i] == nil {
				users[i] = eval(pipe, []string{k.User, s.keys.ShardKeys(k.Shard).Log}) // counted: state_read.lua
				read[k.User] = users[i]
			}
			evs[i] = nil
			if r.MinTs <= r.MaxTs {
				evs[i] = pipe.ZRangeByScoreWithScores(ctx, k.Events, &redis.ZRangeBy{
					Min: strconv.FormatInt(r.MinTs, 10), Max: strconv.FormatInt(r.MaxTs, 10),
				})
			}
			creates[i] = nil
			if r.Create {
				creates[i] = pipe.HGet(ctx, k.Undo, "c")
			}
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := run(func(p redis.Pipeliner, keys []string) *redis.Cmd { return sc.EvalSha(ctx, p, keys) })
	if err != nil && isNoScript(users[0].Err()) {
		err = run(func(p redis.Pipeliner, keys []string) *redis.Cmd { return sc.Eval(ctx, p, keys) })
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read sessions to flush: %w", err)
	}
	out := make([]FlushRead, len(refs))
	for i, r := range refs {
		user, err := stringMap(users[i].Val())
		if err != nil {
			return nil, fmt.Errorf("read user state to flush: %w", err)
		}
		out[i] = readForFlush(r, sess[i].Val(), user, evs[i], creates[i])
	}
	return out, nil
}

// stringMap reads a flat (field, value, ...) script reply as a map.
func stringMap(v any) (map[string]string, error) {
	h, err := flat(v)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(h)/2)
	for i := 0; i+1 < len(h); i += 2 {
		m[h[i]] = h[i+1]
	}
	return m, nil
}

func readForFlush(r FlushRef, h, user map[string]string, evs *redis.ZSliceCmd, create *redis.StringCmd) FlushRead {
	var out FlushRead
	out.User, _ = stateRev(user)
	if len(h) == 0 || h["m:del"] == "1" || h["m:inc"] != strconv.FormatInt(r.Incarnation, 10) {
		return out
	}
	flatH := make([]any, 0, 2*len(h))
	for f, v := range h {
		flatH = append(flatH, f, v)
	}
	snap := &Snapshot{}
	if err := snap.parse(flatH, user, []any{}, nil); err != nil {
		out.Err = fmt.Errorf("%s: %w", r.String(), err)
		return out
	}
	out.Snap = snap
	if create != nil {
		out.CreateState = create.Val()
	}
	if evs == nil {
		return out
	}
	for _, z := range evs.Val() {
		member, _ := z.Member.(string)
		rec, err := parseMember(member, strconv.FormatFloat(z.Score, 'f', -1, 64))
		if err != nil {
			out.BadEvents = append(out.BadEvents, BadEvent{Member: member, Ts: int64(z.Score), Err: err})
			continue
		}
		out.Events = append(out.Events, rec)
	}
	return out
}

// StateRev is a user's or an app's state as the flusher reads it.
type StateRev struct {
	State map[string]string // keys without prefix -> JSON
	Rev   int64
	Dead  int64 // the revision already dead-lettered (-1: none)
	OK    bool  // Redis holds the state hash
	// Rebase: the hash is out of step with the database (m:rb, set by
	// flushed.lua): the flusher writes the database's state plus the new
	// deltas, not this snapshot.
	Rebase bool
	// Flush is the hash's flush count after this read (m:fc, counted by
	// state_read.lua; 0 for an app's state, which is not counted).
	Flush int64
	// Recorded is one above the greatest flush count of the hash it knows
	// the database records (m:fr: set by flushed.lua once a batch that
	// read it committed, and by hydrate_state.lua from the database's
	// count); 0 when the hash does not say. A read whose batch never
	// commits moves Flush and not Recorded.
	Recorded int64
	// LogTail is, for a user's state, the id of the change log's last
	// entry when the hash was read (state_read.lua): the hash holds the
	// deltas of the changes logged up to it, "" when the log was empty.
	LogTail string
	// Orders are, for an app's state, the order number of the change that
	// last wrote each key (app_order.lua; a key without one was put back
	// from the database or written before changes were numbered).
	Orders map[string]int64
}

func stateRev(h map[string]string) (StateRev, error) {
	st := StateRev{Dead: -1, OK: len(h) > 0, Rebase: h["m:rb"] == "1"}
	st.Flush, _ = strconv.ParseInt(h["m:fc"], 10, 64)
	st.Recorded, _ = strconv.ParseInt(h["m:fr"], 10, 64)
	st.LogTail = h["m:logtail"]
	if dl, err := strconv.ParseInt(h["m:dl"], 10, 64); err == nil {
		st.Dead = dl
	}
	var err error
	st.State, st.Rev, err = stateHash(h)
	return st, err
}

// AppStateRev reads an app's state for the flusher, with the order number
// of the change that wrote each key (StateRev.Orders), in one MULTI: a
// value and its number always belong together.
func (s *Store) AppStateRev(ctx context.Context, app string) (StateRev, error) {
	k := s.keys.App(app)
	var h, o *redis.MapStringStringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		h, o = p.HGetAll(ctx, k.State), p.HGetAll(ctx, k.Order)
		return nil
	})
	if err != nil {
		return StateRev{}, fmt.Errorf("read app state: %w", err)
	}
	st, err := stateRev(h.Val())
	if err != nil {
		return st, err
	}
	st.Orders = map[string]int64{}
	for f, v := range o.Val() {
		if key, ok := strings.CutPrefix(f, "k:"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				st.Orders[key] = n
			}
		}
	}
	return st, nil
}

// UserStateRev reads a user's state for the flusher, counting the read
// (state_read.lua).
func (s *Store) UserStateRev(ctx context.Context, app, user string) (StateRev, error) {
	k := s.keys.Session(app, user, "")
	v, err := s.run(ctx, stateReadScript, []string{k.User, s.keys.ShardKeys(k.Shard).Log}).Result()
	if err != nil {
		return StateRev{}, fmt.Errorf("read user state: %w", err)
	}
	h, err := stringMap(v)
	if err != nil {
		return StateRev{}, fmt.Errorf("read user state: %w", err)
	}
	return stateRev(h)
}
