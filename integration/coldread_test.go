package integration

// Cold reads (docs/persistence.md, "Cold reads"): once Redis has lost a session (flushed,
// evicted, restarted), Get, List and GetUserState serve it from Postgres and
// put it back into Redis atomically; appends keep working; rows written by
// ADK Python and ADK JS themselves are served.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestColdReadStandalone(t *testing.T) {
	t.Parallel()
	runColdRead(t, testenv.RedisURL(t), nil)
}

func TestColdReadCluster(t *testing.T) {
	t.Parallel()
	runColdRead(t, testenv.ClusterURL(t), nil)
}

// TestColdReadFlushAll: a private Redis loses everything (FLUSHALL) after a flush.
func TestColdReadFlushAll(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	runColdRead(t, r.URL, func(e *wbEnv) {
		require.NoError(t, e.rdb.FlushAll(wbCtx(t)).Err())
	})
}

// mergedState is the state a Get must return for k.
func (m *model) mergedState(k sessKey) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.sessions[k].state()
	for kk, v := range m.users[[2]string{k.app, k.user}] {
		st["user:"+kk] = v
	}
	for kk, v := range m.apps[k.app] {
		st["app:"+kk] = v
	}
	return st
}

func (m *model) events(k sessKey) []*service.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[k].sorted()
}

func stateMap(s *service.Session) map[string]any {
	out := map[string]any{}
	for k, v := range s.State().All() {
		out[k] = jsonRound(v)
	}
	return out
}

// checkGet asserts that Get of k, with the window of req, returns the
// model's state and the window of the model's events.
func (e *wbEnv) checkGet(svc *service.Service, k sessKey, numRecent int, after time.Time) *service.Session {
	e.t.Helper()
	got, err := svc.Get(wbCtx(e.t), &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid, NumRecentEvents: numRecent, After: after})
	require.NoError(e.t, err, "get %v", k)
	var want []*service.Event
	for _, ev := range e.model.events(k) {
		if after.IsZero() || !ev.Timestamp.Before(after) {
			want = append(want, ev)
		}
	}
	if numRecent > 0 && len(want) > numRecent {
		want = want[len(want)-numRecent:]
	}
	require.Equal(e.t, eventSummaries(want), eventSummaries(slices.Collect(got.Session.Events().All())), "events of %v (n=%d, after=%v)", k, numRecent, after)
	require.Equal(e.t, e.model.mergedState(k), stateMap(got.Session), "state of %v", k)
	return got.Session
}

// populate creates sessions of two users of one app, with app, user and
// session state and events, and returns their keys.
func populate(e *wbEnv, app string, perUser, events int) []sessKey {
	var keys []sessKey
	for u := range 2 {
		user := fmt.Sprint("user-", u)
		for i := range perUser {
			sid := fmt.Sprintf("s%d:{x}", i)
			s := e.create(e.svc, app, user, sid, map[string]any{"init": i, "user:since": u, "app:v": 1})
			for j := range events {
				e.mustAppend(e.svc, s, fmt.Sprint("inv-", j/3), fmt.Sprintf("msg %d", j), map[string]any{
					"j": j, fmt.Sprintf("user:u%d", i): j, fmt.Sprintf("app:%s-%d", user, i): j, "temp:t": j,
				})
			}
			keys = append(keys, sessKey{app, user, sid})
		}
	}
	return keys
}

func runColdRead(t *testing.T, url string, flushAll func(*wbEnv)) {
	e := newWB(t, url, testenv.FreshDatabase(t), concurrentAppends)
	ctx := wbCtx(t)
	if flushAll == nil {
		flushAll = func(e *wbEnv) { require.Positive(t, e.wipeNamespace()) }
	}
	keys := populate(e, "app", 3, 12)
	e.flush(e.svc)
	checkDB(t, e.db, e.model)
	flushAll(e)

	// Get: state of every scope, events, windows.
	for _, k := range keys {
		evs := e.model.events(k)
		e.checkGet(e.svc, k, 0, time.Time{})
		e.checkGet(e.svc, k, 5, time.Time{})
		e.checkGet(e.svc, k, 0, evs[7].Timestamp)
		e.checkGet(e.svc, k, 2, evs[7].Timestamp)
	}
	// Lists: of each user, and of the app.
	flushAll(e)
	listed := func(user string) []string {
		var ids []string
		token := ""
		for {
			resp, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: user, PageSize: 2, PageToken: token})
			require.NoError(t, err)
			for _, s := range resp.Sessions {
				require.Equal(t, e.model.mergedState(sessKey{"app", s.UserID(), s.ID()}), stateMap(s), "listed state of %s/%s", s.UserID(), s.ID())
				ids = append(ids, s.UserID()+"/"+s.ID())
			}
			if token = resp.NextPageToken; token == "" {
				break
			}
		}
		sort.Strings(ids)
		return ids
	}
	var all []string
	for _, k := range keys {
		all = append(all, k.user+"/"+k.sid)
	}
	sort.Strings(all)
	require.Equal(t, all[:3], listed("user-0"))
	require.Equal(t, all[3:], listed("user-1"))
	flushAll(e)
	require.Equal(t, all, listed(""))

	// GetUserState.
	flushAll(e)
	us, err := e.svc.GetUserState(ctx, &service.UserStateRequest{AppName: "app", UserID: "user-1"})
	require.NoError(t, err)
	require.Equal(t, e.model.users[[2]string{"app", "user-1"}], jsonRound(us))

	// Appends and creates keep working and are flushed.
	flushAll(e)
	for _, k := range keys[:2] {
		s, err := e.svc.Get(ctx, &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid, NumRecentEvents: 1})
		require.NoError(t, err)
		e.mustAppend(e.svc, s.Session, "after", "after the wipe", map[string]any{"j": 100, "user:after": k.sid, "app:after": k.sid})
	}
	_, err = e.svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "user-0", SessionID: keys[0].sid})
	require.ErrorIs(t, err, service.ErrAlreadyExists, "an id only the database holds")
	e.create(e.svc, "app", "user-0", "new", map[string]any{"user:new": true})
	e.flush(e.svc)
	checkDB(t, e.db, e.model)

	// Concurrent appends race the rehydration: nothing is lost.
	flushAll(e)
	const writers, each = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := keys[w%2]
			for i := range each {
				s, err := e.svc.Get(context.Background(), &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid, NumRecentEvents: 3})
				if err != nil {
					errs <- err
					return
				}
				if err := e.appendEv(e.svc, s.Session, fmt.Sprint("race-", w), fmt.Sprintf("w%d-%d", w, i),
					map[string]any{fmt.Sprintf("w%d", w): i, fmt.Sprintf("user:w%d", w): i}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, k := range keys {
		e.checkGet(e.svc, k, 0, time.Time{})
	}
	e.flush(e.svc)
	checkDB(t, e.db, e.model)
}

// TestColdReadADKRows: sessions that ADK Python and ADK JS wrote (in their
// exact row shapes) are served by Get and continued by AppendEvent.
func TestColdReadADKRows(t *testing.T) {
	t.Parallel()
	created := time.Date(2024, 5, 6, 7, 8, 9, 654321000, time.UTC)
	at := func(i int) time.Time { return created.Add(time.Duration(i) * 1500 * time.Millisecond) }
	for _, shape := range []struct {
		name   string
		schema string // a DDL file of persist/testdata, "" for ours converted as ADK JS does
		event  func(i int) string
		format func(time.Time) string
		wantFC string // the function call key as served (API form)
	}{
		{"python", "adk-python-v1-postgres.sql", func(i int) string {
			// Event.model_dump: snake_case, timestamp in float epoch seconds.
			return fmt.Sprintf(`{"content":{"parts":[{"text":"q%d"},{"function_call":{"id":"c1","name":"f","args":{"a_b":1}}}],"role":"user"},`+
				`"invocation_id":"json-inv","author":"user","actions":{"state_delta":{"user:x":%d},"artifact_delta":{},`+
				`"requested_auth_configs":{},"requested_tool_confirmations":{}},"id":"json-id","timestamp":%.6f}`,
				i, i, float64(at(i).UnixMicro())/1e6)
		}, func(t time.Time) string { return t.Format("2006-01-02 15:04:05.000000") }, "functionCall"},
		{"js", "", func(i int) string {
			// ADK JS 2.0.0: timestamp in epoch ms, camelCase content keys.
			return fmt.Sprintf(`{"id":"json-id","invocation_id":"json-inv","author":"agent","content":{"role":"model",`+
				`"parts":[{"text":"q%d"},{"functionCall":{"name":"f","args":{"a_b":1}}},{"inlineData":{"mimeType":"text/plain","data":"aGk="}}]},`+
				`"actions":{"state_delta":{},"artifact_delta":{}},"timestamp":%d}`, i, at(i).UnixMilli())
		}, func(t time.Time) string {
			return t.In(time.FixedZone("IST", 19800)).Format("2006-01-02 15:04:05.000000-07:00")
		}, "functionCall"},
	} {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := wbCtx(t)
			dbURL := testenv.FreshDatabase(t)
			raw := openDB(t, dbURL)
			if shape.schema != "" {
				ddl, err := os.ReadFile("../persist/testdata/" + shape.schema)
				require.NoError(t, err)
				_, err = raw.Exec(string(ddl))
				require.NoError(t, err)
			} else {
				require.NoError(t, service.Migrate(ctx, dbURL))
				_, err := raw.Exec(`
ALTER TABLE events ALTER COLUMN "timestamp" TYPE timestamptz USING "timestamp" AT TIME ZONE 'UTC';
ALTER TABLE sessions ALTER COLUMN create_time TYPE timestamptz USING create_time AT TIME ZONE 'UTC',
  ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
ALTER TABLE app_states ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
ALTER TABLE user_states ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
DROP INDEX idx_events_app_user_session_ts;`)
				require.NoError(t, err)
			}
			const n = 4
			exec := func(q string, args ...any) {
				t.Helper()
				_, err := raw.Exec(q, args...)
				require.NoError(t, err)
			}
			exec(`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ('app', 'u', 'adk', '{"k": "v", "n": null}', $1, $2)`,
				shape.format(created), shape.format(at(n)))
			exec(`INSERT INTO app_states (app_name, state, update_time) VALUES ('app', '{"a": 1}', $1)`, shape.format(created))
			exec(`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ('app', 'u', '{"x": 2}', $1)`, shape.format(created))
			for i := 1; i <= n; i++ {
				exec(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, 'app', 'u', 'adk', $2, $3, $4)`,
					fmt.Sprint("adk-", i), fmt.Sprint("inv-", i), shape.format(at(i)), shape.event(i))
			}

			e := newWB(t, testenv.RedisURL(t), dbURL, nil)
			got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "adk"})
			require.NoError(t, err)
			s := got.Session
			require.Equal(t, map[string]any{"k": "v", "n": nil, "app:a": float64(1), "user:x": float64(2)}, stateMap(s))
			require.Equal(t, at(n), s.LastUpdateTime())
			require.Equal(t, n, s.Events().Len())
			for i := 1; i <= n; i++ {
				ev := s.Events().At(i - 1)
				require.Equal(t, []any{fmt.Sprint("adk-", i), fmt.Sprint("inv-", i), at(i).UnixMicro()},
					[]any{ev.ID, ev.InvocationID, ev.Timestamp.UnixMicro()}, "event %d: columns are authoritative", i)
				require.Contains(t, string(ev.Content), fmt.Sprintf(`"text":"q%d"`, i))
				require.Contains(t, string(ev.Content), `"`+shape.wantFC+`":{`)
				require.Contains(t, string(ev.Content), `"a_b":1`, "free-form args keep their keys")
			}
			win, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "adk", NumRecentEvents: 2, After: at(2)})
			require.NoError(t, err)
			require.Equal(t, []string{"adk-3", "adk-4"}, []string{win.Session.Events().At(0).ID, win.Session.Events().At(1).ID})

			// adksession continues the session; the flush keeps ADK's rows.
			ev := &service.Event{InvocationID: "ours", Author: "user", Actions: service.EventActions{StateDelta: map[string]any{"k": "w", "user:x": 3}}}
			require.NoError(t, e.svc.AppendEvent(ctx, s, ev))
			e.flush(e.svc)
			rows := readDB(t, e.db)
			k := sessKey{"app", "u", "adk"}
			require.Len(t, rows.Events[k], n+1)
			require.Equal(t, "adk-1", rows.Events[k][0].ID)
			require.Equal(t, ev.ID, rows.Events[k][n].ID)
			require.Equal(t, map[string]any{"k": "w", "n": nil}, rows.Sessions[k].State)
			require.Equal(t, ev.Timestamp.UnixMicro(), rows.Sessions[k].UpdateUS)
			require.Equal(t, created.UnixMicro(), rows.Sessions[k].CreateUS)
			require.Equal(t, map[string]any{"x": float64(3)}, rows.Users[[2]string{"app", "u"}])
			require.Equal(t, map[string]any{"a": float64(1)}, rows.Apps["app"])
		})
	}
}

func openDB(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestColdReadADKRowsOutOfRange: rows ADK Python wrote with times that no
// script holds (ADK Python takes timestamp=1e10, year 2286, and negative
// ones) are read clamped into [1970, 2200), in their order, cold and
// warm, and the session goes on (docs/persistence.md, "Timestamps").
func TestColdReadADKRowsOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := wbCtx(t)
	dbURL := testenv.FreshDatabase(t)
	raw := openDB(t, dbURL)
	ddl, err := os.ReadFile("../persist/testdata/adk-python-v1-postgres.sql")
	require.NoError(t, err)
	_, err = raw.Exec(string(ddl))
	require.NoError(t, err)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := raw.Exec(q, args...)
		require.NoError(t, err)
	}
	format := func(t time.Time) string { return t.Format("2006-01-02 15:04:05.000000") }
	first, last := time.UnixMicro(service.MinTimestampMicros).UTC(), time.UnixMicro(service.MaxTimestampMicros-1).UTC()
	normal := time.Date(2024, 5, 6, 7, 8, 9, 654321000, time.UTC)
	// Event 1 before 1970, 2 and 3 in range, 4 to 15 from 2286 on, 1.5 s apart.
	const n = 15
	at := func(i int) time.Time {
		switch {
		case i == 1:
			return time.Unix(-5, 0).UTC()
		case i <= 3:
			return normal.Add(time.Duration(i) * time.Second)
		}
		return time.Unix(1e10, 0).Add(time.Duration(i) * 1500 * time.Millisecond).UTC()
	}
	// Served: event i (its seq) i-1 µs into 1970, or 2^32-i µs before 2200.
	served := func(i int) time.Time {
		switch {
		case i == 1:
			return first
		case i <= 3:
			return at(i)
		}
		return time.UnixMicro(service.MaxTimestampMicros - 1<<32 + int64(i)).UTC()
	}
	exec(`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ('app', 'u', 'late', '{"k": "v"}', $1, $2)`,
		format(time.Unix(-10, 0).UTC()), format(at(n)))
	exec(`INSERT INTO app_states (app_name, state, update_time) VALUES ('app', '{}', $1)`, format(time.Unix(2e10, 0).UTC()))
	exec(`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ('app', 'u', '{}', $1)`, format(time.Unix(2e10, 0).UTC()))
	for i := 1; i <= n; i++ {
		// Event.model_dump: timestamp in float epoch seconds, as given.
		data := fmt.Sprintf(`{"content":{"parts":[{"text":"q%d"}],"role":"user"},"invocation_id":"inv-%d","author":"user",`+
			`"actions":{"state_delta":{},"artifact_delta":{},"requested_auth_configs":{},"requested_tool_confirmations":{}},`+
			`"id":"adk-%d","timestamp":%.6f}`, i, i, i, float64(at(i).UnixMicro())/1e6)
		exec(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, 'app', 'u', 'late', $2, $3, $4)`,
			fmt.Sprint("adk-", i), fmt.Sprint("inv-", i), format(at(i)), data)
	}

	e := newWB(t, testenv.RedisURL(t), dbURL, nil)
	check := func(what string, s *service.Session, from int) {
		t.Helper()
		var ids, want []string
		var times, wantTimes []time.Time
		for i := 0; i < s.Events().Len(); i++ {
			ev := s.Events().At(i)
			ids, times = append(ids, ev.ID), append(times, ev.Timestamp)
			require.Contains(t, string(ev.Content), fmt.Sprintf(`"text":"q%d"`, from+i), what)
		}
		for i := from; i <= n; i++ {
			want, wantTimes = append(want, fmt.Sprint("adk-", i)), append(wantTimes, served(i))
		}
		require.Equal(t, want, ids, "%s: the events in their order", what)
		require.Equal(t, wantTimes, times, "%s: their times, clamped", what)
		require.Equal(t, last, s.LastUpdateTime(), "%s: the session's update time, clamped", what)
	}
	get := func(req *service.GetRequest) *service.Session {
		t.Helper()
		req.AppName, req.UserID, req.SessionID = "app", "u", "late"
		got, err := e.svc.Get(ctx, req)
		require.NoError(t, err)
		return got.Session
	}
	check("cold read", get(&service.GetRequest{}), 1)
	s := get(&service.GetRequest{})
	check("warm read", s, 1)
	check("the newest 12", get(&service.GetRequest{NumRecentEvents: 12}), 4)
	check("after 2199", get(&service.GetRequest{After: time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC)}), 4)
	list, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1)
	require.Equal(t, last, list.Sessions[0].LastUpdateTime(), "a listing serves the clamped update time")

	// The session goes on. An event appended after it is stored at the end
	// of the range (2200), the latest time adksession writes: in the
	// database, as ADK reads it too, it sorts before the rows dated beyond.
	ev := &service.Event{InvocationID: "ours", Author: "user"}
	require.NoError(t, e.svc.AppendEvent(ctx, s, ev))
	require.Equal(t, time.UnixMicro(service.MaxTimestampMicros).UTC(), ev.Timestamp, "1µs after the session's update time")
	require.Equal(t, ev.ID, get(&service.GetRequest{}).Events().At(n).ID, "appended last, in Redis")
	e.flush(e.svc)
	// Read cold again, through a service on another namespace.
	cold, err := newWB(t, testenv.RedisURL(t), dbURL, nil).svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "late"})
	require.NoError(t, err)
	var ids []string
	var prev time.Time
	for i := 0; i < cold.Session.Events().Len(); i++ {
		got := cold.Session.Events().At(i)
		ids = append(ids, got.ID)
		require.True(t, got.Timestamp.After(prev), "event %d: times strictly increase", i)
		prev = got.Timestamp
	}
	want := []string{"adk-1", "adk-2", "adk-3", ev.ID}
	for i := 4; i <= n; i++ {
		want = append(want, fmt.Sprint("adk-", i))
	}
	require.Equal(t, want, ids, "the database's order")
}

// TestColdGetAnswersAsWarm: a Get of a session Redis lost (its keys
// evicted, with its user's state or without) answers, for every window, the
// events and state a Get of the session Redis holds answers: the put-back
// answers the read from the events it put back (cache.Store.HydrateGet), and
// the events decoded beside it are those of the window. After bounds fall on
// an event's time exactly, on none, before the first and past the last; the
// cache holds only the newest 6 of the 10 events (MaxCachedEvents), so some
// windows reach into the database too.
func TestColdGetAnswersAsWarm(t *testing.T) {
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.MaxCachedEvents = 6 })
	ctx := wbCtx(t)
	k := sessKey{"cold-warm", "u", "s"}
	s := e.create(e.svc, k.app, k.user, k.sid, map[string]any{"init": 1, "user:u": 0})
	for j := range 10 {
		e.mustAppend(e.svc, s, fmt.Sprint("inv-", j/3), fmt.Sprintf("msg %d", j), map[string]any{"j": j, "user:u": j})
	}
	e.flush(e.svc)
	events := e.model.events(k)
	at := func(i int) time.Time { return events[i].Timestamp }
	sk := e.sessionKeys(k.app, k.user, k.sid)
	for _, w := range []struct {
		n     int
		after time.Time
	}{
		{0, time.Time{}}, {3, time.Time{}}, {6, time.Time{}}, {8, time.Time{}}, {20, time.Time{}},
		{0, at(5)}, {0, at(2)}, {2, at(5)}, {4, at(7)}, {3, at(0)}, {0, at(9)}, {1, at(9).Add(time.Microsecond)},
		{0, at(4).Add(-time.Microsecond)}, {0, at(0).Add(-time.Hour)},
	} {
		req := &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid, NumRecentEvents: w.n, After: w.after}
		for _, lose := range [][]string{
			{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp},
			{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp, sk.User},
		} {
			require.NoError(t, e.rdb.Del(ctx, lose...).Err())
			cold, err := e.svc.Get(ctx, req)
			require.NoError(t, err)
			require.Equal(t, int64(1), e.rdb.Exists(ctx, sk.Session).Val(), "the cold read put the session back")
			warm, err := e.svc.Get(ctx, req)
			require.NoError(t, err)
			name := fmt.Sprintf("n=%d after=%v, %d keys lost", w.n, w.after, len(lose))
			require.Equal(t, slices.Collect(warm.Session.Events().All()), slices.Collect(cold.Session.Events().All()), name)
			require.Equal(t, stateMap(warm.Session), stateMap(cold.Session), name)
			e.checkGet(e.svc, k, w.n, w.after)
		}
	}
}
