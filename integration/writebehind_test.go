package integration

// Write-behind (docs/design.md, "Write-behind") against real Redis
// (standalone and a 3-master Cluster) and a real Postgres: every test
// asserts that the database rows equal what was acknowledged, row for row.
// The helpers here (wbEnv, model, checkDB) are shared by faults_test.go,
// coldread_test.go and flush_bench_test.go.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// wbEnv is one test's deployment over a fresh Postgres database (or Redis
// only), with the model of what was acknowledged.
type wbEnv struct {
	*deployment
	model *model
}

func wbCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newWB migrates dbURL and opens a Service on redisURL in a new namespace;
// with an empty dbURL, Redis only.
func newWB(t testing.TB, redisURL, dbURL string, tweak func(*service.Config)) *wbEnv {
	t.Helper()
	cfg := service.Config{RedisURL: redisURL, DatabaseURL: dbURL, FlushInterval: 20 * time.Millisecond}
	return &wbEnv{deployment: newDeployment(t, "wb-", cfg, tweak), model: newModel()}
}

// concurrentAppends is the Config tweak of tests whose appenders race
// (Config.ConcurrentAppends).
func concurrentAppends(c *service.Config) { c.ConcurrentAppends = true }

func (e *wbEnv) flush(svc *service.Service) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(e.t, svc.Flush(ctx))
}

// create creates a session through svc and records it.
func (e *wbEnv) create(svc *service.Service, app, user, sid string, state map[string]any) *service.Session {
	e.t.Helper()
	resp, err := svc.Create(wbCtx(e.t), &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: state})
	require.NoError(e.t, err)
	e.model.created(resp.Session, state)
	return resp.Session
}

// appendEv appends an event with delta and records it; it returns the error
// so that load generators can count failures.
func (e *wbEnv) appendEv(svc *service.Service, sess *service.Session, inv, text string, delta map[string]any) error {
	ev := &service.Event{InvocationID: inv, Author: "model",
		Content: json.RawMessage(fmt.Sprintf(`{"role":"model","parts":[{"text":%q},{"functionCall":{"name":"f","args":{"camelKey":1}}}]}`, text)),
		Actions: service.EventActions{StateDelta: delta}}
	if err := svc.AppendEvent(wbCtx(e.t), sess, ev); err != nil {
		return err
	}
	e.model.appended(sess, ev, delta)
	return nil
}

func (e *wbEnv) mustAppend(svc *service.Service, sess *service.Session, inv, text string, delta map[string]any) {
	e.t.Helper()
	require.NoError(e.t, e.appendEv(svc, sess, inv, text, delta))
}

func (e *wbEnv) delete(svc *service.Service, app, user, sid string) {
	e.t.Helper()
	require.NoError(e.t, svc.Delete(wbCtx(e.t), &service.DeleteRequest{AppName: app, UserID: user, SessionID: sid}))
	e.model.deleted(app, user, sid)
}

// sessionKeys lists the Redis keys of a session's own data.
func (e *wbEnv) sessionKeys(app, user, sid string) cache.SessionKeys {
	return e.keys.Session(app, user, sid)
}

// pttl is the PTTL of a key (-1 no TTL, -2 missing).
func (e *wbEnv) pttl(key string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(wbCtx(e.t), key).Result()
	require.NoError(e.t, err)
	return d
}

// wipeNamespace deletes every key of the test's namespace (the shared-Redis
// equivalent of a FLUSHALL).
func (e *wbEnv) wipeNamespace() int {
	e.t.Helper()
	keys := e.namespaceKeys()
	for _, k := range keys {
		require.NoError(e.t, e.rdb.Del(wbCtx(e.t), k).Err())
	}
	return len(keys)
}

// ---------------------------------------------------------------------------
// The model of what was acknowledged.

type sessKey struct{ app, user, sid string }

type mSession struct {
	created time.Time
	initial map[string]any // session-scoped keys of the initial state
	events  []*service.Event
}

// model records every acknowledged write. Events of a session are ordered
// by timestamp (append order, strictly increasing); user and app keys are
// recorded in acknowledgement order, so concurrent writers must not write
// the same user or app key.
type model struct {
	mu       sync.Mutex
	sessions map[sessKey]*mSession
	users    map[[2]string]map[string]any
	apps     map[string]map[string]any
}

func newModel() *model {
	return &model{sessions: map[sessKey]*mSession{}, users: map[[2]string]map[string]any{}, apps: map[string]map[string]any{}}
}

// scoped applies a delta's app: and user: keys, and returns its session keys.
func (m *model) scoped(app, user string, delta map[string]any) map[string]any {
	sess := map[string]any{}
	for k, v := range delta {
		switch {
		case strings.HasPrefix(k, "app:"):
			if m.apps[app] == nil {
				m.apps[app] = map[string]any{}
			}
			m.apps[app][strings.TrimPrefix(k, "app:")] = jsonRound(v)
		case strings.HasPrefix(k, "user:"):
			uk := [2]string{app, user}
			if m.users[uk] == nil {
				m.users[uk] = map[string]any{}
			}
			m.users[uk][strings.TrimPrefix(k, "user:")] = jsonRound(v)
		case strings.HasPrefix(k, "temp:"):
		default:
			sess[k] = jsonRound(v)
		}
	}
	return sess
}

func (m *model) created(s *service.Session, state map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sessKey{s.AppName(), s.UserID(), s.ID()}
	m.sessions[k] = &mSession{created: s.LastUpdateTime(), initial: m.scoped(k.app, k.user, state)}
	if m.users[[2]string{k.app, k.user}] == nil {
		m.users[[2]string{k.app, k.user}] = map[string]any{}
	}
	if m.apps[k.app] == nil {
		m.apps[k.app] = map[string]any{}
	}
}

func (m *model) appended(s *service.Session, ev *service.Event, delta map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sessKey{s.AppName(), s.UserID(), s.ID()}
	ms := m.sessions[k]
	if ms == nil {
		// A session the test did not create through the model (ADK rows).
		ms = &mSession{initial: map[string]any{}}
		m.sessions[k] = ms
	}
	m.scoped(k.app, k.user, delta)
	ms.events = append(ms.events, ev.Clone())
}

func (m *model) deleted(app, user, sid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, sessKey{app, user, sid})
}

// sorted returns a session's events in append (timestamp) order.
func (ms *mSession) sorted() []*service.Event {
	evs := slices.Clone(ms.events)
	sort.Slice(evs, func(i, j int) bool { return evs[i].Timestamp.Before(evs[j].Timestamp) })
	return evs
}

// state replays the session-scoped keys.
func (ms *mSession) state() map[string]any {
	st := maps.Clone(ms.initial)
	for _, ev := range ms.sorted() {
		for k, v := range ev.Actions.StateDelta {
			if !strings.HasPrefix(k, "app:") && !strings.HasPrefix(k, "user:") && !strings.HasPrefix(k, "temp:") {
				st[k] = jsonRound(v)
			}
		}
	}
	return st
}

func (ms *mSession) updateTime() time.Time {
	evs := ms.sorted()
	if len(evs) == 0 {
		return ms.created
	}
	return evs[len(evs)-1].Timestamp
}

// jsonRound is v as it reads back from JSON.
func jsonRound(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// ---------------------------------------------------------------------------
// The database as rows.

// dbRows is every row of the ADK tables, in a comparable form.
type dbRows struct {
	Sessions map[sessKey]dbSession
	Events   map[sessKey][]dbEvent // ordered by timestamp
	Users    map[[2]string]map[string]any
	Apps     map[string]map[string]any
}

type dbSession struct {
	State              map[string]any
	CreateUS, UpdateUS int64
}

type dbEvent struct {
	ID, InvocationID string
	US               int64 // column timestamp, µs UTC
	Data             map[string]any
	Raw              string
}

func queryRows(t testing.TB, db *sql.DB, q string, scan func(*sql.Rows) error) {
	t.Helper()
	rows, err := db.Query(q)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		require.NoError(t, scan(rows))
	}
	require.NoError(t, rows.Err())
}

func unmarshalMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

// usExpr reads a timestamp column as exact µs since the epoch, UTC (both
// timestamp and timestamptz columns).
func usExpr(col string) string {
	return fmt.Sprintf(`(extract(epoch FROM %s) * 1000000)::bigint`, col)
}

func readDB(t testing.TB, db *sql.DB) dbRows {
	t.Helper()
	r := dbRows{Sessions: map[sessKey]dbSession{}, Events: map[sessKey][]dbEvent{},
		Users: map[[2]string]map[string]any{}, Apps: map[string]map[string]any{}}
	queryRows(t, db, `SELECT app_name, user_id, id, state, `+usExpr("create_time")+`, `+usExpr("update_time")+` FROM sessions`,
		func(rows *sql.Rows) error {
			var k sessKey
			var st []byte
			var s dbSession
			if err := rows.Scan(&k.app, &k.user, &k.sid, &st, &s.CreateUS, &s.UpdateUS); err != nil {
				return err
			}
			s.State = unmarshalMap(t, st)
			r.Sessions[k] = s
			return nil
		})
	queryRows(t, db, `SELECT app_name, user_id, session_id, id, invocation_id, `+usExpr(`"timestamp"`)+`, event_data
FROM events ORDER BY app_name, user_id, session_id, "timestamp"`,
		func(rows *sql.Rows) error {
			var k sessKey
			var e dbEvent
			var data []byte
			if err := rows.Scan(&k.app, &k.user, &k.sid, &e.ID, &e.InvocationID, &e.US, &data); err != nil {
				return err
			}
			e.Data, e.Raw = unmarshalMap(t, data), string(data)
			r.Events[k] = append(r.Events[k], e)
			return nil
		})
	queryRows(t, db, `SELECT app_name, user_id, state FROM user_states`, func(rows *sql.Rows) error {
		var k [2]string
		var st []byte
		if err := rows.Scan(&k[0], &k[1], &st); err != nil {
			return err
		}
		r.Users[k] = unmarshalMap(t, st)
		return nil
	})
	queryRows(t, db, `SELECT app_name, state FROM app_states`, func(rows *sql.Rows) error {
		var app string
		var st []byte
		if err := rows.Scan(&app, &st); err != nil {
			return err
		}
		r.Apps[app] = unmarshalMap(t, st)
		return nil
	})
	return r
}

// expectedRows is what the database must hold for m.
func (m *model) expectedRows() dbRows {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := dbRows{Sessions: map[sessKey]dbSession{}, Events: map[sessKey][]dbEvent{},
		Users: map[[2]string]map[string]any{}, Apps: map[string]map[string]any{}}
	for k, ms := range m.sessions {
		r.Sessions[k] = dbSession{State: ms.state(), CreateUS: ms.created.UnixMicro(), UpdateUS: ms.updateTime().UnixMicro()}
		var evs []dbEvent
		for _, ev := range ms.sorted() {
			evs = append(evs, dbEvent{ID: ev.ID, InvocationID: ev.InvocationID, US: ev.Timestamp.UnixMicro()})
		}
		if len(evs) > 0 {
			r.Events[k] = evs
		}
	}
	for k, v := range m.users {
		r.Users[k] = v
	}
	for k, v := range m.apps {
		r.Apps[k] = v
	}
	return r
}

// checkDB asserts that the database holds exactly what m acknowledged: the
// same sessions (state, create and update time), the same events in the
// same order with the same ids, invocation ids and µs timestamps, event_data
// in ADK's storage form carrying the same values, the same user and app
// states. It also returns the rows.
func checkDB(t testing.TB, db *sql.DB, m *model) dbRows {
	t.Helper()
	want, got := m.expectedRows(), readDB(t, db)
	require.Equal(t, len(want.Sessions), len(got.Sessions), "number of sessions rows")
	for k, ws := range want.Sessions {
		gs, ok := got.Sessions[k]
		require.True(t, ok, "session %v has no row", k)
		require.Equal(t, ws, gs, "sessions row of %v", k)
	}
	require.Equal(t, len(want.Events), len(got.Events), "sessions with events rows")
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, we := range want.Events {
		ge := got.Events[k]
		require.Equal(t, len(we), len(ge), "events rows of %v", k)
		evs := m.sessions[k].sorted()
		for i := range we {
			g := ge[i]
			require.Equal(t, [3]any{we[i].ID, we[i].InvocationID, we[i].US}, [3]any{g.ID, g.InvocationID, g.US},
				"event %d of %v (id, invocation, timestamp µs)", i, k)
			checkEventData(t, evs[i], g)
		}
	}
	require.Equal(t, want.Users, got.Users, "user_states rows")
	require.Equal(t, want.Apps, got.Apps, "app_states rows")
	return got
}

// checkEventData checks event_data against the acknowledged event: ADK's
// storage form (snake_case keys, timestamp in epoch ms, state_delta with
// prefixes and without temp:, the four actions maps), same content.
func checkEventData(t testing.TB, ev *service.Event, g dbEvent) {
	t.Helper()
	d := g.Data
	require.Equal(t, ev.ID, d["id"], "event_data.id of %s", ev.ID)
	require.Equal(t, ev.InvocationID, d["invocation_id"], "event_data.invocation_id of %s", ev.ID)
	require.InDelta(t, float64(ev.Timestamp.UnixMicro())/1000, d["timestamp"], 0.0005, "event_data.timestamp (ms) of %s", ev.ID)
	require.Equal(t, ev.Author, d["author"], "event_data.author of %s", ev.ID)
	for k := range d {
		require.Equal(t, strings.ToLower(k), k, "event_data key %q of %s is not snake_case: %s", k, ev.ID, g.Raw)
	}
	actions, _ := d["actions"].(map[string]any)
	for _, k := range []string{"state_delta", "artifact_delta", "requested_auth_configs", "requested_tool_confirmations"} {
		require.Contains(t, actions, k, "event_data.actions of %s: %s", ev.ID, g.Raw)
	}
	wantDelta := map[string]any{}
	for k, v := range ev.Actions.StateDelta {
		if !strings.HasPrefix(k, "temp:") {
			wantDelta[k] = jsonRound(v)
		}
	}
	require.Equal(t, wantDelta, actions["state_delta"], "event_data.actions.state_delta of %s", ev.ID)
	var content map[string]any
	require.NoError(t, json.Unmarshal(ev.Content, &content))
	require.Equal(t, snakeKeys(content), d["content"], "event_data.content of %s", ev.ID)
}

// snakeKeys is a content object with ADK's snake_case keys, free-form maps
// (function args and responses) kept as they are.
func snakeKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			sk := testenv.ToSnake(k)
			if k == "args" || k == "response" {
				out[sk] = val
				continue
			}
			out[sk] = snakeKeys(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = snakeKeys(x[i])
		}
		return out
	}
	return v
}

// ---------------------------------------------------------------------------
// Tests.

func TestWriteBehindStandalone(t *testing.T) {
	t.Parallel()
	runWriteBehind(t, testenv.RedisURL(t))
}

func TestWriteBehindCluster(t *testing.T) {
	t.Parallel()
	runWriteBehind(t, testenv.ClusterURL(t))
}

func runWriteBehind(t *testing.T, url string) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T, string)
	}{
		{"Rows", testWBRows},
		{"DeleteAndRecreate", testWBDeleteRecreate},
		{"Eviction", testWBEviction},
		{"MaxCachedEvents", testWBMaxCachedEvents},
		{"KeysExpire", testKeysExpire},
		{"UserIndexPartialEviction", testUserIndexPartialEviction},
		{"ListWithoutEvents", testListWithoutEvents},
		{"AppListing", testAppListing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, url)
		})
	}
}

// testWBRows: sessions, events, app and user states of several apps and
// users reach the database exactly as acknowledged.
func testWBRows(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), nil)
	ids := []string{"s1", "odd: {id}/with spaces\n", "s3"}
	var sessions []*service.Session
	for i, sid := range ids {
		app := fmt.Sprintf("app%d", i%2)
		sessions = append(sessions, e.create(e.svc, app, fmt.Sprintf("user%d", i%2), sid,
			map[string]any{"k": "v", "n": nil, "user:name": fmt.Sprint("u", i), "app:created": i, "temp:dropped": 1}))
	}
	for round := range 5 {
		for i, s := range sessions {
			e.mustAppend(e.svc, s, fmt.Sprintf("inv-%d", round/2), fmt.Sprintf("reply %d <b>&</b> é", round), map[string]any{
				"count": round, "nested": map[string]any{"camelKey": []any{round, "x"}}, "gone": nil,
				"user:last": fmt.Sprint(i, "-", round), fmt.Sprintf("app:s%d", i): round, "temp:scratch": round,
			})
		}
	}
	e.flush(e.svc)
	got := checkDB(t, e.db, e.model)
	require.Len(t, got.Sessions, 3)
	for _, evs := range got.Events {
		require.Len(t, evs, 5)
	}
	// Flushing again changes nothing.
	e.flush(e.svc)
	require.Equal(t, got, readDB(t, e.db))
}

// testWBDeleteRecreate: a delete removes the row and its events; a
// re-created id keeps only its new incarnation; Get after Delete is
// ErrNotFound before and after the flush.
func testWBDeleteRecreate(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	ctx := wbCtx(t)
	flusher := e.svc.NewFlusher(nil)
	a := e.create(e.svc, "app", "u", "a", map[string]any{"x": 1})
	b := e.create(e.svc, "app", "u", "b", nil)
	for i := range 3 {
		e.mustAppend(e.svc, a, "i1", fmt.Sprint("a", i), map[string]any{"x": i})
		e.mustAppend(e.svc, b, "i1", fmt.Sprint("b", i), map[string]any{"y": i})
	}
	drain(t, flusher)
	checkDB(t, e.db, e.model)

	// Flushed session deleted: Get is ErrNotFound before the delete is flushed.
	e.delete(e.svc, "app", "u", "a")
	_, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "a"})
	require.ErrorIs(t, err, service.ErrNotFound)
	drain(t, flusher)
	checkDB(t, e.db, e.model)
	_, err = e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "a"})
	require.ErrorIs(t, err, service.ErrNotFound)

	// Unflushed session deleted and re-created, all in one batch: only the
	// new incarnation reaches the database.
	e.mustAppend(e.svc, b, "i2", "more", map[string]any{"y": 10})
	e.delete(e.svc, "app", "u", "b")
	b2 := e.create(e.svc, "app", "u", "b", map[string]any{"fresh": true})
	e.mustAppend(e.svc, b2, "i3", "new life", map[string]any{"z": 1})
	drain(t, flusher)
	checkDB(t, e.db, e.model)

	// Flushed id deleted, then re-created after that delete is flushed.
	e.create(e.svc, "app", "u", "a", map[string]any{"again": 1})
	drain(t, flusher)
	checkDB(t, e.db, e.model)
	got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "a"})
	require.NoError(t, err)
	require.Equal(t, 0, got.Session.Events().Len())
	// The tombstones are gone once their deletes are flushed.
	require.Empty(t, e.rdb.HGet(ctx, e.sessionKeys("app", "u", "b").Session, "m:del").Val())
	require.NoError(t, flusher.Stop(ctx))
}

// drain runs flusher passes until the change log is empty.
func drain(t testing.TB, f interface {
	RunOnce(context.Context) (int, error)
}) {
	t.Helper()
	ctx := wbCtx(t)
	for {
		n, err := f.RunOnce(ctx)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// testWBEviction: keys holding unflushed writes carry no TTL; once flushed,
// an idle session's keys expire after CacheTTL.
func testWBEviction(t *testing.T, url string) {
	const ttl = 10 * time.Minute
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true; c.CacheTTL = ttl })
	flusher := e.svc.NewFlusher(nil)
	s := e.create(e.svc, "app", "u", "s", map[string]any{"user:k": 1})
	e.mustAppend(e.svc, s, "i", "one", map[string]any{"a": 1, "user:k": 2})
	k := e.sessionKeys("app", "u", "s")
	for _, key := range []string{k.Session, k.Events, k.User} {
		require.Equal(t, time.Duration(-1), e.pttl(key), "unflushed key %s", key)
	}
	drain(t, flusher)
	for _, key := range []string{k.Session, k.Events, k.User} {
		d := e.pttl(key)
		require.True(t, d > ttl-time.Minute && d <= ttl, "flushed idle key %s: PTTL %v, want about %v", key, d, ttl)
	}
	// A new write makes them durable again until it is flushed.
	e.mustAppend(e.svc, s, "i", "two", map[string]any{"a": 2})
	for _, key := range []string{k.Session, k.Events} {
		require.Equal(t, time.Duration(-1), e.pttl(key), "key %s with an unflushed write", key)
	}
	drain(t, flusher)
	require.Greater(t, e.pttl(k.Session), ttl-time.Minute)
	checkDB(t, e.db, e.model)
}

// testWBMaxCachedEvents: Redis keeps the newest MaxCachedEvents flushed
// events; windows reaching past them are served from the database.
func testWBMaxCachedEvents(t *testing.T, url string) {
	e := newWB(t, url, testenv.FreshDatabase(t), func(c *service.Config) { c.MaxCachedEvents = 10; c.FlushBatchSize = 7 })
	ctx := wbCtx(t)
	s := e.create(e.svc, "app", "u", "s", nil)
	for i := range 50 {
		e.mustAppend(e.svc, s, fmt.Sprint("inv-", i/5), fmt.Sprint("event ", i), map[string]any{"i": i})
	}
	e.flush(e.svc)
	checkDB(t, e.db, e.model)
	k := e.sessionKeys("app", "u", "s")
	require.Equal(t, int64(10), e.rdb.ZCard(ctx, k.Events).Val(), "cached events")

	want := e.model.sessions[sessKey{"app", "u", "s"}].sorted()
	check := func(req service.GetRequest, want []*service.Event) {
		t.Helper()
		got, err := e.svc.Get(ctx, &req)
		require.NoError(t, err)
		require.Equal(t, eventSummaries(want), eventSummaries(slices.Collect(got.Session.Events().All())), "%+v", req)
		v, err := got.Session.State().Get("i")
		require.NoError(t, err)
		require.Equal(t, float64(49), v)
	}
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 30}, want[20:])
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"}, want)
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", After: want[15].Timestamp}, want[15:])
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", After: want[15].Timestamp, NumRecentEvents: 20}, want[30:])
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", After: want[15].Timestamp, NumRecentEvents: 40}, want[15:])
	check(service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", NumRecentEvents: 5}, want[45:])
	// Appending keeps working after the trim, and the next flush trims again.
	e.mustAppend(e.svc, s, "inv-x", "after trim", map[string]any{"i": 49})
	e.flush(e.svc)
	checkDB(t, e.db, e.model)
	require.Equal(t, int64(10), e.rdb.ZCard(ctx, k.Events).Val(), "cached events")
}

// eventSummary is what identifies an event and its content in comparisons.
type eventSummary struct {
	ID, Inv string
	US      int64
	Content string
	Delta   string
}

func eventSummaries(evs []*service.Event) []eventSummary {
	out := make([]eventSummary, len(evs))
	for i, ev := range evs {
		var c any
		json.Unmarshal(ev.Content, &c)
		cb, _ := json.Marshal(c)
		db, _ := json.Marshal(ev.Actions.StateDelta)
		out[i] = eventSummary{ID: ev.ID, Inv: ev.InvocationID, US: ev.Timestamp.UnixMicro(), Content: string(cb), Delta: string(db)}
	}
	return out
}
