package integration

// Rewind against real Redis (standalone and cluster): ADK's A/B/C example,
// keys added, changed and nulled after the point, artifacts, create-time
// state, nested rewinds checked against a model of ADK's replay, a rewind
// racing concurrent appends, and the cold path (undo records trimmed).

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/persist"
	"github.com/adksession/adksession/service"
)

func TestRewindStandalone(t *testing.T) {
	t.Parallel()
	runRewind(t, testenv.RedisURL(t))
}

func TestRewindCluster(t *testing.T) {
	t.Parallel()
	runRewind(t, testenv.ClusterURL(t))
}

// rwEnv is the contract tests' env with the steps of a rewind test: one
// app and user, sessions by id.
type rwEnv struct {
	*env
	ctx context.Context
}

func newRwEnv(t *testing.T, url string, concurrent bool) *rwEnv {
	t.Helper()
	return &rwEnv{env: newEnv(t, url, func(c *service.Config) { c.ConcurrentAppends = concurrent }), ctx: ctxT(t)}
}

func (e *rwEnv) create(sid string, state map[string]any) *service.Session {
	e.t.Helper()
	resp, err := e.svc.Create(e.ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: sid, State: state})
	require.NoError(e.t, err)
	return resp.Session
}

// step appends one event of invocation inv to the session's newest handle.
func (e *rwEnv) step(sid, inv string, delta map[string]any, artifacts map[string]int64) {
	e.t.Helper()
	sess := e.get(sid)
	ev := &service.Event{InvocationID: inv, Author: "agent", Actions: service.EventActions{StateDelta: delta, ArtifactDelta: artifacts}}
	require.NoError(e.t, e.svc.AppendEvent(e.ctx, sess, ev))
}

func (e *rwEnv) get(sid string) *service.Session {
	e.t.Helper()
	resp, err := e.svc.Get(e.ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: sid})
	require.NoError(e.t, err)
	return resp.Session
}

func (e *rwEnv) rewind(sid, before string) *service.Event {
	e.t.Helper()
	ev, err := e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: sid, BeforeInvocationID: before})
	require.NoError(e.t, err)
	return ev
}

// sessionState is the session-scoped part of a session's state.
func sessionState(sess *service.Session) map[string]any {
	out := map[string]any{}
	for k, v := range sess.State().All() {
		if !strings.HasPrefix(k, "app:") && !strings.HasPrefix(k, "user:") && !strings.HasPrefix(k, "temp:") {
			out[k] = v
		}
	}
	return out
}

func allEvents(sess *service.Session) []*service.Event {
	var out []*service.Event
	for ev := range sess.Events().All() {
		out = append(out, ev)
	}
	return out
}

func isSessionKey(k string) bool {
	return !strings.HasPrefix(k, "app:") && !strings.HasPrefix(k, "user:") && !strings.HasPrefix(k, "temp:")
}

// replay applies the session-scoped deltas of events to a copy of create.
func replay(create map[string]any, events []*service.Event) map[string]any {
	s := maps.Clone(create)
	for _, ev := range events {
		for k, v := range ev.Actions.StateDelta {
			if isSessionKey(k) {
				s[k] = v
			}
		}
	}
	return s
}

// nonNull drops null values (ADK's replay treats them as absent).
func nonNull(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// modelRewind is what a rewind before inv must write, given the history
// before it: ADK's _compute_state_delta_for_rewind and
// _compute_artifact_delta_for_rewind, replaying from the create-time state,
// with only the keys whose value changes (null and absent are the same), and
// artifact versions as they were at the point (-1: no version then).
func modelRewind(create map[string]any, events []*service.Event, inv string) (map[string]any, map[string]int64) {
	p := -1
	for i, ev := range events {
		if ev.InvocationID == inv {
			p = i
			break
		}
	}
	then, now := nonNull(replay(create, events[:p])), nonNull(replay(create, events))
	delta := map[string]any{}
	for k, v := range then {
		if fmt.Sprint(now[k]) != fmt.Sprint(v) || now[k] == nil {
			delta[k] = v
		}
	}
	for k := range now {
		if _, ok := then[k]; !ok {
			delta[k] = nil
		}
	}
	thenFiles, nowFiles := map[string]int64{}, map[string]int64{}
	for i, ev := range events {
		for f, v := range ev.Actions.ArtifactDelta {
			if i < p {
				thenFiles[f] = v
			}
			nowFiles[f] = v
		}
	}
	files := map[string]int64{}
	for f, cur := range nowFiles {
		if strings.HasPrefix(f, "user:") {
			continue
		}
		was, ok := thenFiles[f]
		if !ok {
			was = -1
		}
		if was != cur {
			files[f] = was
		}
	}
	return delta, files
}

func runRewind(t *testing.T, url string) {
	t.Run("ABC", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"init": "x"})
		e.step("s", "A", map[string]any{"count": 1.0, "a": "A"}, nil)
		e.step("s", "B", map[string]any{"count": 2.0, "b": "B"}, nil)
		e.step("s", "B", map[string]any{"b2": true}, nil)
		e.step("s", "C", map[string]any{"count": 3.0, "c": "C", "a": "A2"}, nil)

		ev := e.rewind("s", "B")
		require.Equal(t, "user", ev.Author)
		require.True(t, strings.HasPrefix(ev.InvocationID, "e-"), ev.InvocationID)
		require.Len(t, ev.InvocationID, 2+36)
		require.NotEmpty(t, ev.ID)
		require.Equal(t, "B", ev.Actions.RewindBeforeInvocationID)
		require.Equal(t, map[string]any{"count": 1.0, "a": "A", "b": nil, "b2": nil, "c": nil}, ev.Actions.StateDelta)
		require.Empty(t, ev.Actions.ArtifactDelta)

		sess := e.get("s")
		require.Equal(t, map[string]any{"init": "x", "count": 1.0, "a": "A", "b": nil, "b2": nil, "c": nil}, sessionState(sess))
		events := allEvents(sess)
		require.Len(t, events, 5, "rewound events stay stored")
		require.Equal(t, ev.ID, events[4].ID)
		require.Equal(t, ev.Timestamp, events[4].Timestamp)
		visible := service.VisibleEvents(events)
		require.Len(t, visible, 1)
		require.Equal(t, "A", visible[0].InvocationID)
		require.Equal(t, sess.LastUpdateTime(), ev.Timestamp)
	})

	t.Run("KeysAddedChangedNulled", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"created": "c0", "gone": "g0"})
		e.step("s", "A", map[string]any{"changed": "v1", "nulled": "n1", "same": "s1", "app:shared": "a1", "user:pref": "p1"}, nil)
		e.step("s", "B", map[string]any{"changed": "v2", "added": "x", "nulled": nil, "gone": nil, "created": "c1",
			"app:shared": "a2", "user:pref": "p2", "temp:scratch": "t"}, nil)
		e.step("s", "C", map[string]any{"same": "s1", "created": "c0"}, nil)

		ev := e.rewind("s", "B")
		require.Equal(t, map[string]any{"changed": "v1", "added": nil, "nulled": "n1", "gone": "g0"}, ev.Actions.StateDelta,
			"only keys whose value changes; app:, user: and temp: keys are not rewound")

		sess := e.get("s")
		require.Equal(t, map[string]any{"created": "c0", "gone": "g0", "changed": "v1", "nulled": "n1", "same": "s1", "added": nil}, sessionState(sess))
		v, err := sess.State().Get("app:shared")
		require.NoError(t, err)
		require.Equal(t, "a2", v, "app state is not rewound")
		v, err = sess.State().Get("user:pref")
		require.NoError(t, err)
		require.Equal(t, "p2", v, "user state is not rewound")
	})

	t.Run("CreateTimeStateKept", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"greeting": "hi", "n": 1.0})
		e.step("s", "A", map[string]any{"greeting": "yo", "extra": 1.0}, nil)
		ev := e.rewind("s", "A")
		require.Equal(t, map[string]any{"greeting": "hi", "extra": nil}, ev.Actions.StateDelta)
		require.Equal(t, map[string]any{"greeting": "hi", "n": 1.0, "extra": nil}, sessionState(e.get("s")))
	})

	t.Run("Artifacts", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", nil)
		e.step("s", "A", nil, map[string]int64{"report.pdf": 0, "notes.txt": 0})
		e.step("s", "B", nil, map[string]int64{"report.pdf": 1, "image.png": 0, "user:avatar.png": 0})
		e.step("s", "C", nil, map[string]int64{"report.pdf": 2, "notes.txt": 0})
		ev := e.rewind("s", "B")
		require.Equal(t, map[string]int64{"report.pdf": 0, "image.png": -1}, ev.Actions.ArtifactDelta,
			"versions at the point, -1 for files that did not exist; user: files are not rewound")
		require.Empty(t, ev.Actions.StateDelta)

		// The rewind's own versions count as current for the next rewind.
		e.step("s", "D", nil, map[string]int64{"image.png": 1})
		ev = e.rewind("s", ev.InvocationID)
		require.Equal(t, map[string]int64{"report.pdf": 2, "image.png": 0}, ev.Actions.ArtifactDelta)
	})

	t.Run("NestedRewinds", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		create := map[string]any{"k": "c"}
		e.create("s", create)
		e.step("s", "A", map[string]any{"k": "a", "a": 1.0}, nil)
		e.step("s", "B", map[string]any{"k": "b", "b": 1.0}, nil)
		e.step("s", "C", map[string]any{"k": "c2", "c": 1.0}, nil)
		r1 := e.rewind("s", "C")
		require.Equal(t, map[string]any{"k": "b", "a": 1.0, "b": 1.0, "c": nil}, sessionState(e.get("s")))
		e.step("s", "D", map[string]any{"k": "d", "d": 1.0}, nil)
		// Rewinding before the rewind's own invocation brings back what it undid.
		e.rewind("s", r1.InvocationID)
		require.Equal(t, map[string]any{"k": "c2", "a": 1.0, "b": 1.0, "c": 1.0, "d": nil}, sessionState(e.get("s")))
		events := allEvents(e.get("s"))
		require.Equal(t, []string{"A", "B", "C"}, invocations(service.VisibleEvents(events)))
		// Rewinding before an invocation inside a rewound range works from its first event.
		e.rewind("s", "B")
		sess := e.get("s")
		require.Equal(t, map[string]any{"k": "a", "a": 1.0, "b": nil, "c": nil, "d": nil}, sessionState(sess))
		require.Equal(t, []string{"A"}, invocations(service.VisibleEvents(allEvents(sess))))
	})

	t.Run("RandomHistoryMatchesADKReplay", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		rng := rand.New(rand.NewPCG(4, 4))
		create := map[string]any{"k0": "init", "k1": 0.0}
		e.create("s", create)
		var invs []string
		for i := range 120 {
			sess := e.get("s")
			events := allEvents(sess)
			if len(invs) > 0 && rng.IntN(5) == 0 {
				before := invs[rng.IntN(len(invs))]
				wantDelta, wantFiles := modelRewind(create, events, before)
				ev := e.rewind("s", before)
				require.Equal(t, wantDelta, ev.Actions.StateDelta, "rewind %d before %s", i, before)
				require.Equal(t, wantFiles, nonNilFiles(ev.Actions.ArtifactDelta), "rewind %d before %s", i, before)
				invs = append(invs, ev.InvocationID)
				p := 0
				for events[p].InvocationID != before {
					p++
				}
				require.Equal(t, nonNull(replay(create, events[:p])), nonNull(sessionState(e.get("s"))), "state after rewind %d", i)
				continue
			}
			inv := fmt.Sprintf("I%d", i)
			if len(invs) > 0 && rng.IntN(3) == 0 {
				inv = invs[len(invs)-1] // a second event of the newest invocation
			} else {
				invs = append(invs, inv)
			}
			delta := map[string]any{}
			for range rng.IntN(4) {
				k := fmt.Sprintf("k%d", rng.IntN(6))
				if rng.IntN(4) == 0 {
					delta[k] = nil
				} else {
					delta[k] = float64(rng.IntN(5))
				}
			}
			if rng.IntN(4) == 0 {
				delta["user:u"] = float64(i)
			}
			files := map[string]int64{}
			if rng.IntN(3) == 0 {
				files[fmt.Sprintf("f%d", rng.IntN(3))] = int64(i)
			}
			ev := &service.Event{InvocationID: inv, Author: "agent", Actions: service.EventActions{StateDelta: delta, ArtifactDelta: files}}
			require.NoError(t, e.svc.AppendEvent(e.ctx, sess, ev))
		}
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", nil)
		e.step("s", "A", map[string]any{"k": 1.0}, nil)
		_, err := e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "nope"})
		require.ErrorIs(t, err, service.ErrNotFound)
		require.EqualError(t, err, "adksession: not found: invocation nope in session s of app app, user u")
		_, err = e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "missing", BeforeInvocationID: "A"})
		require.ErrorIs(t, err, service.ErrNotFound)
		_, err = e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "other", SessionID: "s", BeforeInvocationID: "A"})
		require.ErrorIs(t, err, service.ErrNotFound)
		_, err = e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s"})
		require.ErrorIs(t, err, service.ErrInvalidArgument)
		require.Len(t, allEvents(e.get("s")), 1, "nothing appended")
	})

	t.Run("DeleteAndRecreate", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"v": "old"})
		e.step("s", "A", map[string]any{"v": "a"}, map[string]int64{"f": 3})
		require.NoError(t, e.svc.Delete(e.ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}))
		e.create("s", map[string]any{"v": "new"})
		_, err := e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "A"})
		require.ErrorIs(t, err, service.ErrNotFound, "the old incarnation's invocations are gone")
		e.step("s", "B", map[string]any{"v": "b"}, map[string]int64{"f": 0})
		ev := e.rewind("s", "B")
		require.Equal(t, map[string]any{"v": "new"}, ev.Actions.StateDelta)
		require.Equal(t, map[string]int64{"f": -1}, ev.Actions.ArtifactDelta)
	})

	t.Run("UndoRecordsTrimmed", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		rdb, keys := e.rdb, e.keys
		build := func(sid string) {
			e.create(sid, map[string]any{"k": "c", "keep": 1.0})
			e.step(sid, "A", map[string]any{"k": "a"}, map[string]int64{"f": 0})
			e.step(sid, "B", map[string]any{"k": "b", "x": 1.0}, map[string]int64{"f": 1})
			e.step(sid, "C", map[string]any{"k": "c3"}, nil)
		}
		build("hot")
		build("cold")
		// As the flusher does when it trims the oldest events: the undo
		// records of seq 1 and 2 are gone, m:from moves up.
		undo := keys.Session("app", "u", "cold").Undo
		require.NoError(t, rdb.HDel(e.ctx, undo, "1", "2", "i:A", "i:B").Err())
		require.NoError(t, rdb.HSet(e.ctx, undo, "m:from", 3).Err())

		for _, before := range []string{"A", "B"} {
			hot, cold := e.rewind("hot", before), e.rewind("cold", before)
			require.Equal(t, hot.Actions.StateDelta, cold.Actions.StateDelta, "before %s", before)
			require.Equal(t, hot.Actions.ArtifactDelta, cold.Actions.ArtifactDelta, "before %s", before)
			require.Equal(t, sessionState(e.get("hot")), sessionState(e.get("cold")), "before %s", before)
		}
		require.Equal(t, map[string]any{"k": "a", "keep": 1.0, "x": nil}, sessionState(e.get("cold")))

		// Undo records lost entirely (evicted): the create-time state is
		// unknown, so the rewind replays from an empty state, as ADK does.
		require.NoError(t, rdb.Del(e.ctx, undo).Err())
		ev := e.rewind("cold", "A")
		require.Equal(t, map[string]any{"k": nil, "keep": nil}, ev.Actions.StateDelta)
	})

	t.Run("RacingConcurrentAppends", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, true)
		create := map[string]any{"k": "c"}
		e.create("s", create)
		e.step("s", "A", map[string]any{"k": "a"}, nil)
		e.step("s", "B", map[string]any{"k": "b", "b": 1.0}, nil)
		const n = 50
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, n+1)
		for i := range n {
			sess := e.get("s")
			wg.Go(func() {
				<-start
				ev := &service.Event{InvocationID: fmt.Sprintf("W%d", i), Author: "agent",
					Actions: service.EventActions{StateDelta: map[string]any{fmt.Sprintf("w%d", i): float64(i), "k": fmt.Sprintf("w%d", i)}}}
				errs <- e.svc.AppendEvent(e.ctx, sess, ev)
			})
			if i == n/2 {
				wg.Go(func() {
					<-start
					_, err := e.svc.Rewind(e.ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "B"})
					errs <- err
				})
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		sess := e.get("s")
		events := allEvents(sess)
		require.Len(t, events, 2+n+1)
		r := -1
		for i, ev := range events {
			if ev.Actions.RewindBeforeInvocationID != "" {
				r = i
			}
		}
		require.GreaterOrEqual(t, r, 2)
		// The rewind saw exactly the appends ordered before it: its delta is
		// the one a serial rewind at that position writes.
		wantDelta, _ := modelRewind(create, events[:r], "B")
		require.Equal(t, wantDelta, events[r].Actions.StateDelta)
		require.Equal(t, nonNull(replay(create, events)), nonNull(sessionState(sess)))
		state := sessionState(sess)
		for i, ev := range events[2:] {
			if i+2 == r {
				continue
			}
			key := "w" + strings.TrimPrefix(ev.InvocationID, "W")
			if i+2 < r {
				require.Nil(t, state[key], "%s appended before the rewind is undone", key)
			} else {
				require.Equal(t, ev.Actions.StateDelta[key], state[key], "%s appended after the rewind stays", key)
			}
		}
	})
}

// TestRewindFromDatabase rewinds sessions whose rewound events are only in
// Postgres: older than the cached tail, and evicted from Redis altogether.
func TestRewindFromDatabase(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := testenv.FreshDatabase(t)
	require.NoError(t, persist.Migrate(ctx, db))
	e := &rwEnv{ctx: ctx, env: newEnv(t, testenv.RedisURL(t), func(c *service.Config) {
		c.DatabaseURL, c.MaxCachedEvents = db, 2
	})}
	svc, rdb, keys := e.svc, e.rdb, e.keys
	create := map[string]any{"k": "c", "keep": 1.0}
	build := func(sid string) {
		e.create(sid, create)
		for i, inv := range []string{"A", "B", "C", "D", "E", "F"} {
			e.step(sid, inv, map[string]any{"k": inv, inv: float64(i)}, map[string]int64{"f": int64(i)})
		}
	}
	build("trimmed")
	build("evicted")
	require.NoError(t, svc.Flush(ctx))

	// Only the 2 newest events are cached; the undo records reach further.
	k := keys.Session("app", "u", "trimmed")
	n, err := rdb.ZCard(ctx, k.Events).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the flusher trimmed the cached tail")
	events := allEvents(e.get("trimmed"))
	require.Len(t, events, 6, "Get reads the older events from the database")
	wantDelta, wantFiles := modelRewind(create, events, "B")
	ev := e.rewind("trimmed", "B")
	require.Equal(t, wantDelta, ev.Actions.StateDelta)
	require.Equal(t, wantFiles, ev.Actions.ArtifactDelta)
	require.Equal(t, map[string]any{"k": "A", "keep": 1.0, "A": 0.0, "B": nil, "C": nil, "D": nil, "E": nil, "F": nil}, sessionState(e.get("trimmed")))

	// Evicted: every Redis key of the session is gone; the rewind reads it
	// back from the database and replays its history from the create-time
	// state the flusher recorded there: "keep" (set only at creation) stays.
	k = keys.Session("app", "u", "evicted")
	require.NoError(t, rdb.Del(ctx, k.Session, k.Events, k.Undo).Err())
	ev = e.rewind("evicted", "B")
	require.Equal(t, map[string]any{"k": "A", "B": nil, "C": nil, "D": nil, "E": nil, "F": nil}, ev.Actions.StateDelta)
	require.Equal(t, map[string]int64{"f": 0}, ev.Actions.ArtifactDelta)
	require.NoError(t, svc.Flush(ctx))
	require.NoError(t, rdb.Del(ctx, k.Session, k.Events, k.Undo).Err())
	sess := e.get("evicted")
	require.Equal(t, map[string]any{"k": "A", "keep": 1.0, "A": 0.0, "B": nil, "C": nil, "D": nil, "E": nil, "F": nil}, sessionState(sess),
		"the rewind event reached the database like any event")
	require.Equal(t, []string{"A"}, invocations(service.VisibleEvents(allEvents(sess))))
}

func invocations(events []*service.Event) []string {
	var out []string
	for _, ev := range events {
		if len(out) == 0 || out[len(out)-1] != ev.InvocationID {
			out = append(out, ev.InvocationID)
		}
	}
	return out
}

func nonNilFiles(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

// BenchmarkRewind measures a rewind that undoes 10 events at two history
// lengths; its cost should not depend on the history.
func BenchmarkRewind(b *testing.B) {
	for _, history := range []int{100, 100000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			ctx := context.Background()
			svc, err := service.Open(ctx, service.Config{RedisURL: testenv.RedisURL(b), Namespace: testenv.UniqueName(b, "rwb") + ":", ConcurrentAppends: true})
			require.NoError(b, err)
			defer svc.Close(ctx)
			resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
			require.NoError(b, err)
			appendMany(b, svc, resp.Session, "H", history)
			// A handle holding the whole history would make the Go heap (and
			// its GC) grow with it: measure with one holding the newest event.
			got, err := svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 1})
			require.NoError(b, err)
			sess := got.Session
			runtime.GC()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				inv := fmt.Sprintf("X%d", i)
				for j := range 10 {
					require.NoError(b, svc.AppendEvent(ctx, sess, &service.Event{InvocationID: inv, Author: "agent",
						Actions: service.EventActions{StateDelta: map[string]any{fmt.Sprintf("k%d", j): float64(i)}}}))
				}
				b.StartTimer()
				_, err := svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: inv})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
		})
	}
}

// appendMany appends n small events from 8 goroutines.
func appendMany(b *testing.B, svc *service.Service, sess *service.Session, prefix string, n int) {
	b.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				ev := &service.Event{InvocationID: fmt.Sprintf("%s%d", prefix, i), Author: "agent",
					Actions: service.EventActions{StateDelta: map[string]any{fmt.Sprintf("h%d", i%50): float64(i)}}}
				if err := svc.AppendEvent(context.Background(), sess, ev); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
