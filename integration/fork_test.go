package integration

// Fork against real Redis (standalone and cluster): all events or those
// before an invocation, their ids, times and JSON kept, the state of that
// point (session keys set back, keys that did not exist then absent, the
// create-time state kept) checked against a replay of the history, from
// the undo records and from the full history, refusals that write nothing,
// and forks racing concurrent appends. integration/fork_persist_test.go:
// the write-behind and cold reads.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestForkStandalone(t *testing.T) {
	t.Parallel()
	runFork(t, testenv.RedisURL(t))
}

func TestForkCluster(t *testing.T) {
	t.Parallel()
	runFork(t, testenv.ClusterURL(t))
}

func (e *rwEnv) fork(sid, nid, before string) *service.Session {
	e.t.Helper()
	resp, err := e.svc.Fork(e.ctx, &service.ForkRequest{AppName: "app", UserID: "u", SessionID: sid, NewSessionID: nid, BeforeInvocationID: before})
	require.NoError(e.t, err)
	return resp.Session
}

// sameEvents asserts that got are copies of want: ids, invocations,
// timestamps and JSON.
func sameEvents(t *testing.T, want, got []*service.Event, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID, "%s: event %d id", msg, i)
		require.Equal(t, want[i].Timestamp, got[i].Timestamp, "%s: event %d timestamp", msg, i)
		w, err := want[i].MarshalJSON()
		require.NoError(t, err)
		g, err := got[i].MarshalJSON()
		require.NoError(t, err)
		require.JSONEq(t, string(w), string(g), "%s: event %d", msg, i)
	}
}

// firstOf is the index of the first event of inv.
func firstOf(events []*service.Event, inv string) int {
	for i, ev := range events {
		if ev.InvocationID == inv {
			return i
		}
	}
	return -1
}

func runFork(t *testing.T, url string) {
	t.Run("All", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"init": "x", "user:pref": "p0"})
		e.step("s", "A", map[string]any{"count": 1.0, "a": "A", "app:shared": "a1"}, nil)
		sess := e.get("s")
		require.NoError(t, e.svc.AppendEvent(e.ctx, sess, &service.Event{InvocationID: "B", Author: "agent",
			Content:   []byte(`{"role":"model","parts":[{"text":"hi"},{"functionCall":{"name":"f","args":{"x":1}}}]}`),
			Actions:   service.EventActions{StateDelta: map[string]any{"count": 2.0, "temp:t": "tt", "user:pref": "p1", "n": nil}},
			Extra:     map[string]json.RawMessage{"usageMetadata": json.RawMessage(`{"totalTokenCount":3}`)},
			Branch:    "root.b",
			Timestamp: sess.LastUpdateTime().Add(1500),
		}))
		src := e.get("s")

		n := e.fork("s", "n", "")
		require.Equal(t, "n", n.ID())
		require.Equal(t, "app", n.AppName())
		require.Equal(t, "u", n.UserID())
		sameEvents(t, allEvents(src), allEvents(n), "the fork's handle")
		sameEvents(t, allEvents(src), allEvents(e.get("n")), "a Get of the fork")
		require.Equal(t, sessionState(src), sessionState(e.get("n")))
		require.Equal(t, map[string]any{"init": "x", "count": 2.0, "a": "A", "n": nil}, sessionState(e.get("n")))
		got := stateMap(e.get("n"))
		require.Equal(t, "a1", got["app:shared"], "app state is shared")
		require.Equal(t, "p1", got["user:pref"], "user state is shared")
		_, err := e.get("n").State().Get("temp:t")
		require.ErrorIs(t, err, service.ErrStateKeyNotExist)
		inN, err := e.svc.Get(e.ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "n", InvocationID: "B"})
		require.NoError(t, err)
		_, err = inN.Session.State().Get("temp:t")
		require.ErrorIs(t, err, service.ErrStateKeyNotExist, "no temp: state is copied")
		require.Equal(t, src.LastUpdateTime(), e.get("n").LastUpdateTime(), "the time of its last event")
		require.Equal(t, e.storedEvents("app", "u", "s"), e.storedEvents("app", "u", "n"), "the events as Redis holds them")

		// The two sessions go their own ways.
		e.step("n", "C", map[string]any{"count": 3.0}, nil)
		e.step("s", "D", map[string]any{"d": 1.0}, nil)
		require.Equal(t, []string{"A", "B", "C"}, invocations(allEvents(e.get("n"))))
		require.Equal(t, []string{"A", "B", "D"}, invocations(allEvents(e.get("s"))))
		require.Equal(t, 3.0, sessionState(e.get("n"))["count"])
		require.Equal(t, 2.0, sessionState(e.get("s"))["count"])
		list, err := e.svc.List(e.ctx, &service.ListRequest{AppName: "app", UserID: "u"})
		require.NoError(t, err)
		var ids []string
		for _, s := range list.Sessions {
			ids = append(ids, s.ID())
		}
		require.ElementsMatch(t, []string{"s", "n"}, ids)
	})

	t.Run("BeforeInvocation", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"created": "c0", "gone": "g0"})
		e.step("s", "A", map[string]any{"changed": "v1", "nulled": nil, "same": "s1", "user:pref": "p1"}, nil)
		e.step("s", "A", map[string]any{"a2": true}, nil)
		e.step("s", "B", map[string]any{"changed": "v2", "added": "x", "nulled": "n2", "gone": nil, "created": "c1",
			"user:pref": "p2", "temp:scratch": "t"}, nil)
		e.step("s", "C", map[string]any{"same": "s1", "created": "c0", "c": 1.0}, nil)
		src := e.get("s")
		events := allEvents(src)

		n := e.fork("s", "n", "B")
		sameEvents(t, events[:2], allEvents(n), "the events before B")
		want := map[string]any{"created": "c0", "gone": "g0", "changed": "v1", "nulled": nil, "same": "s1", "a2": true}
		require.Equal(t, want, sessionState(n), "keys set back, keys added since absent, the create-time state kept")
		require.Equal(t, want, sessionState(e.get("n")))
		require.Equal(t, events[1].Timestamp, e.get("n").LastUpdateTime())
		v, err := e.get("n").State().Get("user:pref")
		require.NoError(t, err)
		require.Equal(t, "p2", v, "user state is not forked")
		require.Equal(t, events, allEvents(e.get("s")), "the session forked from is unchanged")

		// Before the first invocation: no events, the create-time state.
		n = e.fork("s", "n0", "A")
		require.Empty(t, allEvents(n))
		require.Equal(t, map[string]any{"created": "c0", "gone": "g0"}, sessionState(e.get("n0")))
		require.Equal(t, n.LastUpdateTime(), e.get("n0").LastUpdateTime())
	})

	t.Run("NewIDGenerated", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", nil)
		e.step("s", "A", map[string]any{"k": 1.0}, nil)
		n := e.fork("s", "", "")
		_, err := uuid.Parse(n.ID())
		require.NoError(t, err, n.ID())
		require.Len(t, allEvents(e.get(n.ID())), 1)
	})

	t.Run("RefusedWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"k": "v"})
		e.step("s", "A", map[string]any{"k": 1.0}, nil)
		e.create("taken", nil)
		before := e.dumpNamespace()
		fork := func(req service.ForkRequest) error {
			req.AppName = cmpOr(req.AppName, "app")
			req.UserID = cmpOr(req.UserID, "u")
			_, err := e.svc.Fork(e.ctx, &req)
			return err
		}
		for _, c := range []struct {
			req  service.ForkRequest
			is   error
			want string
		}{
			{service.ForkRequest{SessionID: "s", NewSessionID: "taken"}, service.ErrAlreadyExists, "already exists: session taken of app app, user u"},
			{service.ForkRequest{SessionID: "s", NewSessionID: "s", BeforeInvocationID: "A"}, service.ErrAlreadyExists, "session s of app app"},
			{service.ForkRequest{SessionID: "missing", NewSessionID: "n"}, service.ErrNotFound, "not found: session missing of app app, user u"},
			{service.ForkRequest{UserID: "other", SessionID: "s", NewSessionID: "n"}, service.ErrNotFound, "session s of app app, user other"},
			{service.ForkRequest{SessionID: "s", NewSessionID: "n", BeforeInvocationID: "nope"}, service.ErrNotFound, "not found: invocation nope in session s of app app, user u"},
			{service.ForkRequest{SessionID: "", NewSessionID: "n"}, service.ErrInvalidArgument, "SessionID: empty"},
			{service.ForkRequest{SessionID: "s", NewSessionID: "a\x00b"}, service.ErrInvalidArgument, "NewSessionID: contains NUL"},
			{service.ForkRequest{SessionID: "s", NewSessionID: strings.Repeat("n", 129)}, service.ErrInvalidArgument, "NewSessionID: 129 bytes, limit 128"},
			{service.ForkRequest{SessionID: "s", NewSessionID: "n", BeforeInvocationID: "\xff"}, service.ErrInvalidArgument, "BeforeInvocationID: not valid UTF-8"},
			{service.ForkRequest{SessionID: "s", NewSessionID: "n", BeforeInvocationID: strings.Repeat("i", 256)}, service.ErrInvalidArgument, "BeforeInvocationID: 256 bytes, limit 255"},
		} {
			err := fork(c.req)
			require.ErrorIs(t, err, c.is, "%+v", c.req)
			require.ErrorContains(t, err, c.want, "%+v", c.req)
			require.Equal(t, before, e.dumpNamespace(), "%+v: a refused fork writes nothing", c.req)
		}
		_, err := e.svc.Fork(e.ctx, nil)
		require.ErrorIs(t, err, service.ErrInvalidArgument)
		require.ErrorContains(t, err, "fork request: nil")
		require.Equal(t, before, e.dumpNamespace())
	})

	t.Run("RandomHistoryMatchesReplay", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		rng := rand.New(rand.NewPCG(7, 7))
		create := map[string]any{"k0": "init", "k1": 0.0}
		e.create("s", create)
		var invs []string
		for i := range 60 {
			if len(invs) > 0 && rng.IntN(6) == 0 {
				invs = append(invs, e.rewind("s", invs[rng.IntN(len(invs))]).InvocationID)
				continue
			}
			inv := fmt.Sprintf("I%d", i)
			if len(invs) > 0 && rng.IntN(3) == 0 {
				inv = invs[len(invs)-1]
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
			e.step("s", inv, delta, nil)
		}
		events := allEvents(e.get("s"))
		// From the undo records, and again from the full history (the
		// records trimmed, as the flusher trims them, but for the create-time
		// state): the same copy.
		forkAll := func(prefix string) {
			for j, inv := range invs {
				p := firstOf(events, inv)
				n := e.fork("s", fmt.Sprintf("%s%d", prefix, j), inv)
				sameEvents(t, events[:p], allEvents(n), prefix+" before "+inv)
				require.Equal(t, replay(create, events[:p]), sessionState(e.get(n.ID())), "%s before %s", prefix, inv)
			}
			n := e.fork("s", prefix+"-all", "")
			sameEvents(t, events, allEvents(n), prefix+" all")
			require.Equal(t, replay(create, events), sessionState(e.get(n.ID())), prefix+" all")
		}
		forkAll("undo")
		undo := e.keys.Session("app", "u", "s").Undo
		fields, err := e.rdb.HKeys(e.ctx, undo).Result()
		require.NoError(t, err)
		var drop []string
		for _, f := range fields {
			if f != "c" {
				drop = append(drop, f)
			}
		}
		require.NoError(t, e.rdb.HDel(e.ctx, undo, drop...).Err())
		require.NoError(t, e.rdb.HSet(e.ctx, undo, "m:from", len(events)+1).Err())
		forkAll("history")
	})

	t.Run("ForkThenAppendAndRewind", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, false)
		e.create("s", map[string]any{"k": "c"})
		e.step("s", "A", map[string]any{"k": "a", "a": 1.0}, map[string]int64{"f": 0})
		e.step("s", "B", map[string]any{"k": "b", "b": 1.0}, map[string]int64{"f": 1})
		e.step("s", "C", map[string]any{"k": "c3"}, nil)
		e.fork("s", "n", "C")
		e.step("n", "D", map[string]any{"k": "d", "d": 1.0}, map[string]int64{"f": 2, "g": 0})
		ev := e.rewind("n", "D")
		require.Equal(t, map[string]any{"k": "b", "d": nil}, ev.Actions.StateDelta)
		require.Equal(t, map[string]int64{"f": 1, "g": -1}, ev.Actions.ArtifactDelta)
		ev = e.rewind("n", "B")
		require.Equal(t, map[string]any{"k": "a", "b": nil}, ev.Actions.StateDelta, "before a copied invocation: from the history")
		require.Equal(t, map[string]any{"k": "a", "a": 1.0, "b": nil, "d": nil}, sessionState(e.get("n")))
		ev = e.rewind("n", "A")
		require.Equal(t, map[string]any{"k": "c", "a": nil}, ev.Actions.StateDelta, "the create-time state is the forked session's")
		require.Equal(t, map[string]any{"k": "c3", "a": 1.0, "b": 1.0}, sessionState(e.get("s")), "the session forked from is not rewound")
	})

	t.Run("RacingConcurrentAppends", func(t *testing.T) {
		t.Parallel()
		e := newRwEnv(t, url, true)
		create := map[string]any{"k": "c"}
		e.create("s", create)
		const appenders, each, forks = 4, 15, 12
		var wg sync.WaitGroup
		for a := range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sess := e.get("s")
				for i := range each {
					ev := &service.Event{InvocationID: fmt.Sprintf("w%d-%d", a, i), Author: "agent",
						Actions: service.EventActions{StateDelta: map[string]any{"k": fmt.Sprintf("%d/%d", a, i), fmt.Sprintf("w%d", a): float64(i)}}}
					if err := e.svc.AppendEvent(e.ctx, sess, ev); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		var forked []string
		for f := range forks {
			inv := ""
			if f%2 == 1 {
				inv = fmt.Sprintf("w%d-%d", f%appenders, f)
				if f >= each {
					inv = ""
				}
			}
			nid := fmt.Sprintf("n%d", f)
			_, err := e.svc.Fork(e.ctx, &service.ForkRequest{AppName: "app", UserID: "u", SessionID: "s", NewSessionID: nid, BeforeInvocationID: inv})
			if err != nil {
				require.ErrorIs(t, err, service.ErrNotFound, "fork %d: only an invocation not appended yet is refused", f)
				continue
			}
			forked = append(forked, nid)
		}
		wg.Wait()
		events := allEvents(e.get("s"))
		require.Len(t, events, appenders*each, "every append stored once")
		require.Equal(t, replay(create, events), sessionState(e.get("s")))
		require.NotEmpty(t, forked)
		for _, nid := range forked {
			n := e.get(nid)
			got := allEvents(n)
			sameEvents(t, events[:len(got)], got, nid+": a prefix of the session forked from")
			require.Equal(t, replay(create, got), sessionState(n), nid+": the state of that prefix")
		}
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
