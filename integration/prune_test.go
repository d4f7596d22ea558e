package integration

// Retention (docs/operations.md, "Retention"): Service.Prune against real Postgres and real
// Redis. Every test compares the database with the model of what was
// acknowledged minus what the prune deleted (checkDB), and looks at the
// Redis keys of the pruned sessions themselves.

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// longAgo is when the idle sessions of these tests were last updated.
var longAgo = time.Now().Add(-60 * 24 * time.Hour).Truncate(time.Second)

// idleSession creates a session whose n events are timestamped long ago,
// each setting a session key and, when user or app is set, that key too.
func (e *wbEnv) idleSession(svc *service.Service, app, user, sid string, n int, delta map[string]any) *service.Session {
	e.t.Helper()
	s := e.create(svc, app, user, sid, map[string]any{"created": sid})
	for i := range n {
		d := map[string]any{"n": i}
		for k, v := range delta {
			d[k] = v
		}
		ev := &service.Event{InvocationID: "inv-" + sid, Author: "model", Timestamp: longAgo.Add(time.Duration(i) * time.Second),
			Content: json.RawMessage(fmt.Sprintf(`{"role":"model","parts":[{"text":"old %d of %s"}]}`, i, sid)),
			Actions: service.EventActions{StateDelta: d}}
		require.NoError(e.t, svc.AppendEvent(wbCtx(e.t), s, ev))
		e.model.appended(s, ev, d)
	}
	return s
}

// pruned forgets, in the model, sessions a prune deleted, and the state of
// users and apps left without sessions.
func (m *model) pruned(keys ...sessKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.sessions, k)
	}
	users, apps := map[[2]string]bool{}, map[string]bool{}
	for k := range m.sessions {
		users[[2]string{k.app, k.user}], apps[k.app] = true, true
	}
	for _, k := range keys {
		if !users[[2]string{k.app, k.user}] {
			delete(m.users, [2]string{k.app, k.user})
		}
		if !apps[k.app] {
			delete(m.apps, k.app)
		}
	}
}

// requirePrunedInRedis asserts that Redis holds nothing of a pruned
// session but, for a while, its fence: a tombstone with a TTL.
func (e *wbEnv) requirePrunedInRedis(app, user, sid string) {
	e.t.Helper()
	ctx := wbCtx(e.t)
	k := e.sessionKeys(app, user, sid)
	for _, key := range k.Owned() {
		require.Equal(e.t, time.Duration(-2), e.pttl(key), "%s of pruned session %s is still there", key, sid)
	}
	h, err := e.rdb.HGetAll(ctx, k.Session).Result()
	require.NoError(e.t, err)
	if len(h) > 0 {
		require.Equal(e.t, "1", h["m:del"], "the hash of pruned session %s is not a fence: %v", sid, h)
		require.Greater(e.t, e.pttl(k.Session), time.Duration(0), "the fence of %s has no TTL", sid)
	}
	_, err = e.rdb.ZScore(ctx, k.UserIndex, sid).Result()
	require.ErrorIs(e.t, err, redis.Nil, "pruned session %s is still in its user's index", sid)
	_, err = e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
	require.ErrorIs(e.t, err, service.ErrNotFound, "Get of pruned session %s", sid)
}

// tableCounts counts the rows of every table.
func tableCounts(t testing.TB, e *wbEnv) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"sessions", "events", "user_states", "app_states", "adksession_sessions", "adksession_states"} {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM `+table).Scan(&n))
		out[table] = n
	}
	return out
}

// TestPruneIdleSessions: idle sessions are deleted from Postgres (rows,
// events, bookkeeping) and Redis; fresh ones and the state of users and
// apps that keep a session stay; the state of a user and an app left
// without sessions goes; a session ADK wrote (untracked) is pruned too; a
// dry run changes nothing and counts what the prune then deletes;
// bookkeeping tombstones are stamped by one prune and purged by a later one.
func TestPruneIdleSessions(t *testing.T) {
	t.Parallel()
	testPruneIdleSessions(t, testenv.RedisURL(t))
}

func TestPruneIdleSessionsCluster(t *testing.T) {
	t.Parallel()
	testPruneIdleSessions(t, testenv.ClusterURL(t))
}

func testPruneIdleSessions(t *testing.T, redisURL string) {
	e := newWB(t, redisURL, testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	// alice: only idle sessions (her state goes); bob: one idle, one fresh
	// (his state stays); app "solo": only idle sessions (its state goes).
	e.idleSession(e.svc, "shop", "alice", "a1", 3, map[string]any{"user:lang": "fr", "app:motd": "hi"})
	e.idleSession(e.svc, "shop", "alice", "a2", 2, nil)
	e.idleSession(e.svc, "shop", "bob", "b-old", 4, map[string]any{"user:tz": "CET"})
	fresh := e.create(e.svc, "shop", "bob", "b-new", map[string]any{"k": "v"})
	e.mustAppend(e.svc, fresh, "inv-new", "fresh", map[string]any{"user:plan": "pro"})
	e.idleSession(e.svc, "solo", "carol", "c1", 2, map[string]any{"app:theme": "dark", "user:x": 1})
	e.create(e.svc, "shop", "dave", "gone", nil)
	e.delete(e.svc, "shop", "dave", "gone") // leaves a bookkeeping tombstone once flushed
	e.flush(e.svc)
	// A session ADK itself wrote: no bookkeeping row.
	_, err := e.db.Exec(`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ('shop', 'erin', 'adk', '{}', $1, $1)`, longAgo.UTC())
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data)
VALUES ('e1', 'shop', 'erin', 'adk', 'i', $1, '{"author":"user"}')`, longAgo.UTC())
	require.NoError(t, err)
	_, err = e.db.Exec(`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ('shop', 'erin', '{}', $1)`, longAgo.UTC())
	require.NoError(t, err)
	rowsBefore := tableCounts(t, e)
	keysBefore := len(e.namespaceKeys())

	dry, err := e.svc.Prune(ctx, &service.PruneRequest{IdleFor: 30 * 24 * time.Hour, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, rowsBefore, tableCounts(t, e), "a dry run changed rows")
	require.Equal(t, keysBefore, len(e.namespaceKeys()), "a dry run changed Redis keys")
	require.Equal(t, [6]int64{5, 12, 3, 1, 0, 0}, [6]int64{dry.Sessions, dry.Events, dry.UserStates, dry.AppStates, dry.Kept, dry.Tombstones},
		"dry run: sessions, events, user states (alice, carol, erin), app states (solo), kept, tombstones")
	require.Equal(t, [2]float64{0, 0}, [2]float64{pruneCounter(t, e.svc, "adksession_prune_sessions_total"), pruneCounter(t, e.svc, "adksession_prune_events_total")},
		"a dry run is not counted in the prune metrics")

	sum, err := e.svc.Prune(ctx, &service.PruneRequest{IdleFor: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, [7]int64{5, 12, 3, 1, 0, 0, 1}, [7]int64{sum.Sessions, sum.Events, sum.UserStates, sum.AppStates, sum.Kept, sum.Tombstones, sum.TombstonesSeen},
		"sessions, events, user states, app states, kept, tombstones purged, tombstones seen")
	require.Equal(t, dry.Bytes, sum.Bytes, "bytes counted by the dry run and freed by the prune")
	require.Greater(t, sum.Bytes, int64(12*20), "bytes freed")
	require.Equal(t, 1, sum.Batches)
	require.Equal(t, [2]float64{5, 12}, [2]float64{pruneCounter(t, e.svc, "adksession_prune_sessions_total"), pruneCounter(t, e.svc, "adksession_prune_events_total")},
		"the prune metrics count what was deleted")

	e.model.pruned(sessKey{"shop", "alice", "a1"}, sessKey{"shop", "alice", "a2"}, sessKey{"shop", "bob", "b-old"}, sessKey{"solo", "carol", "c1"})
	checkDB(t, e.db, e.model) // erin's rows are not in the model: checkDB proves them gone too
	var tracked, tombstones int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM adksession_sessions WHERE NOT deleted`).Scan(&tracked))
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM adksession_sessions WHERE deleted`).Scan(&tombstones))
	require.Equal(t, [2]int{1, 1}, [2]int{tracked, tombstones}, "bookkeeping rows: b-new, and dave's tombstone")
	var stateRevs []string
	rows, err := e.db.Query(`SELECT app_name || '/' || user_id FROM adksession_states ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		stateRevs = append(stateRevs, s)
	}
	require.Equal(t, []string{"shop/", "shop/bob", "shop/dave"}, stateRevs, "state bookkeeping rows (Delete keeps dave's state)")

	for _, k := range [][3]string{{"shop", "alice", "a1"}, {"shop", "alice", "a2"}, {"shop", "bob", "b-old"}, {"solo", "carol", "c1"}} {
		e.requirePrunedInRedis(k[0], k[1], k[2])
	}
	for _, k := range []string{e.sessionKeys("shop", "alice", "").User, e.sessionKeys("shop", "alice", "").UserIndex,
		e.sessionKeys("solo", "carol", "").User, e.keys.App("solo").State} {
		require.Equal(t, time.Duration(-2), e.pttl(k), "%s of a user or app left without sessions", k)
	}
	got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "shop", UserID: "bob", SessionID: "b-new"})
	require.NoError(t, err)
	require.Equal(t, 1, got.Session.Events().Len())
	for k, v := range map[string]any{"user:tz": "CET", "user:plan": "pro", "app:motd": "hi", "k": "v"} {
		have, err := got.Session.State().Get(k)
		require.NoError(t, err, k)
		require.Equal(t, v, have, k)
	}
	us, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "shop", UserID: "alice"})
	require.NoError(t, err)
	require.Empty(t, us, "alice's state after her last session was pruned")

	// A pruned id can be created again, and is fresh.
	again := e.create(e.svc, "shop", "alice", "a1", nil)
	require.Equal(t, 0, again.Events().Len())

	// The tombstone was stamped: a prune after the margin purges it.
	sum, err = e.svc.Prune(ctx, &service.PruneRequest{IdleFor: 30 * 24 * time.Hour, TombstoneMargin: time.Nanosecond})
	require.NoError(t, err)
	require.Equal(t, [3]int64{0, 1, 0}, [3]int64{sum.Sessions, sum.Tombstones, sum.TombstonesSeen})
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM adksession_sessions WHERE deleted`).Scan(&tombstones))
	require.Zero(t, tombstones)
}

// TestPruneWhileAppending prunes idle sessions in small batches while
// appenders write to some of them and to fresh sessions. Every append that
// was acknowledged is in the database afterwards with all the session's
// earlier events (its session was kept); a session the prune took refuses
// later appends (ErrNotFound) and has nothing left; appends to fresh
// sessions all succeed (no batch blocks them for long).
func TestPruneWhileAppending(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	const idle, events, batch = 300, 3, 20
	handles := make([]*service.Session, idle)
	for i := range handles {
		handles[i] = e.idleSession(e.svc, "app", fmt.Sprintf("u%d", i%30), fmt.Sprintf("s%03d", i), events, nil)
	}
	freshHandles := make([]*service.Session, 10)
	for i := range freshHandles {
		freshHandles[i] = e.create(e.svc, "app", fmt.Sprintf("f%d", i), "fresh", nil)
	}
	e.flush(e.svc)
	// The idle sessions are what a prune usually finds: flushed long ago
	// and gone from Redis (half of them here; the others still cached).
	for i := 0; i < idle; i += 2 {
		k := e.sessionKeys("app", fmt.Sprintf("u%d", i%30), fmt.Sprintf("s%03d", i))
		require.NoError(t, e.rdb.Del(ctx, append(k.Owned(), k.Session)...).Err())
	}

	var (
		stop          atomic.Bool
		wg            sync.WaitGroup
		mu            sync.Mutex
		touched, gone = map[int]bool{}, map[int]bool{}
		freshFailures atomic.Int64
	)
	// Worker w appends to the idle sessions i = 3w, 3w+12, ... (a handle is
	// used by one goroutine), round after round, until the prune ends.
	for w := range 4 {
		wg.Go(func() {
			for i := 3 * w; !stop.Load(); i = (i + 12) % idle {
				mu.Lock()
				done := touched[i] || gone[i]
				mu.Unlock()
				if done {
					continue
				}
				err := e.appendEv(e.svc, handles[i], "inv-late", "late", map[string]any{"late": true})
				mu.Lock()
				switch {
				case err == nil:
					touched[i] = true
				case errorsIsNotFound(err):
					gone[i] = true
				default:
					mu.Unlock()
					panic(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for n := 0; !stop.Load(); n++ {
			if err := e.appendEv(e.svc, freshHandles[n%len(freshHandles)], fmt.Sprintf("inv-%d", n), "busy", nil); err != nil {
				freshFailures.Add(1)
			}
		}
	})
	var progress []int64
	sum, err := e.svc.Prune(ctx, &service.PruneRequest{IdleFor: 30 * 24 * time.Hour, BatchSize: batch,
		Progress: func(p service.PruneProgress) { progress = append(progress, p.Examined) }})
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	require.Zero(t, freshFailures.Load(), "appends to fresh sessions failed during the prune")
	require.LessOrEqual(t, sum.Batches, idle/batch)
	for i := 1; i < len(progress); i++ {
		require.LessOrEqual(t, progress[i]-progress[i-1], int64(batch), "a batch larger than BatchSize")
	}
	e.flush(e.svc)

	var prunedKeys []sessKey
	kept := 0
	for i := range idle {
		user, sid := fmt.Sprintf("u%d", i%30), fmt.Sprintf("s%03d", i)
		_, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: user, SessionID: sid})
		switch {
		case err == nil:
			kept++
			require.False(t, gone[i], "session %s refused an append as pruned, but is still there", sid)
		case errorsIsNotFound(err):
			require.False(t, touched[i], "session %s took an append and was pruned anyway", sid)
			prunedKeys = append(prunedKeys, sessKey{"app", user, sid})
		default:
			require.NoError(t, err)
		}
	}
	t.Logf("%d idle sessions: %d pruned, %d kept (%d touched during the prune, %d found pruned by an append); %d batches",
		idle, len(prunedKeys), kept, len(touched), len(gone), sum.Batches)
	require.Equal(t, int64(len(prunedKeys)), sum.Sessions)
	// Kept counts the touched sessions the walk still read as idle (those
	// touched and flushed before it got to them were not idle any more).
	require.LessOrEqual(t, sum.Kept, int64(kept))
	require.Equal(t, len(touched), kept, "every kept session is one an append touched")
	e.model.pruned(prunedKeys...)
	checkDB(t, e.db, e.model)
}

func errorsIsNotFound(err error) bool { return errors.Is(err, service.ErrNotFound) }

// TestPruneRefuses: bad requests are ErrInvalidArgument naming the field,
// and a service without a database cannot prune.
func TestPruneRefuses(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	for _, tc := range []struct {
		req  service.PruneRequest
		want string
	}{
		{service.PruneRequest{}, "PruneRequest.IdleFor"},
		{service.PruneRequest{IdleFor: -time.Hour}, "PruneRequest.IdleFor"},
		{service.PruneRequest{IdleFor: time.Hour, BatchSize: service.MaxPruneBatch + 1}, "PruneRequest.BatchSize"},
		{service.PruneRequest{IdleFor: time.Hour, AppName: "a\x00b"}, "PruneRequest.AppName"},
		{service.PruneRequest{IdleFor: time.Hour, TombstoneMargin: -time.Second}, "PruneRequest.TombstoneMargin"},
	} {
		_, err := e.svc.Prune(ctx, &tc.req)
		require.ErrorIs(t, err, service.ErrInvalidArgument)
		require.Contains(t, err.Error(), tc.want)
	}
	noDB := newWB(t, testenv.RedisURL(t), "", nil)
	_, err := noDB.svc.Prune(ctx, &service.PruneRequest{IdleFor: time.Hour})
	require.ErrorIs(t, err, service.ErrInvalidArgument)
	require.Contains(t, err.Error(), "no database")
}

// pruneCounter reads counter name of svc's metrics.
func pruneCounter(t *testing.T, svc *service.Service, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(svc.Metrics()))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1, name)
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
