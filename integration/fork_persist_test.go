package integration

// Fork with Postgres behind Redis: the new session reaches the database by
// the write-behind in ADK's row form (events rows copied from the session
// forked from, with their ids, invocations, times and event_data), reads
// back cold once Redis lost it, and a session only the database holds
// (Redis wiped, or its older events trimmed from the cache) forks the same.

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestForkPersisted(t *testing.T) {
	t.Parallel()
	// The history is longer than what Redis keeps once flushed: a fork of a
	// session read back from the database copies events only it holds.
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.MaxCachedEvents = 2 })
	ctx := wbCtx(t)
	s := e.create(e.svc, "app", "u", "s", map[string]any{"c": 4, "keep": "k", "orig": "o", "user:u": 1})
	e.mustAppend(e.svc, s, "inv1", "one", map[string]any{"c": 5, "x": 1, "user:u": 2})
	e.mustAppend(e.svc, s, "inv1", "two", map[string]any{"y": 2, "keep": nil})
	e.mustAppend(e.svc, s, "inv2", "three", map[string]any{"c": 6, "z": 3, "x": nil})
	e.mustAppend(e.svc, s, "inv3", "four", map[string]any{"c": 7, "temp:t": 1})
	events := allEvents(e.getSess("app", "u", "s"))
	require.Len(t, events, 4)
	wantAll := map[string]any{"c": 7.0, "keep": nil, "orig": "o", "x": nil, "y": 2.0, "z": 3.0}
	wantBefore := map[string]any{"c": 5.0, "keep": nil, "orig": "o", "x": 1.0, "y": 2.0} // before inv2: z did not exist

	fork := func(nid, before string) *service.Session {
		t.Helper()
		resp, err := e.svc.Fork(ctx, &service.ForkRequest{AppName: "app", UserID: "u", SessionID: "s", NewSessionID: nid, BeforeInvocationID: before})
		require.NoError(t, err, "fork to %s", nid)
		return resp.Session
	}
	check := func(nid string, want map[string]any, n int, msg string) {
		t.Helper()
		got := e.getSess("app", "u", nid)
		sameEvents(t, events[:n], allEvents(got), msg+": "+nid)
		require.Equal(t, want, sessionState(got), "%s: state of %s", msg, nid)
		require.Equal(t, 2.0, stateMap(got)["user:u"], "%s: %s shares the user state", msg, nid)
		require.Equal(t, events[n-1].Timestamp, got.LastUpdateTime(), "%s: %s's last update", msg, nid)
	}
	fork("all", "")
	fork("before", "inv2")
	check("all", wantAll, 4, "warm")
	check("before", wantBefore, 2, "warm")
	e.flush(e.svc)

	// The rows: sessions rows with the state and times, events rows copied
	// from the session forked from (ADK's storage form, as the flusher
	// writes any event: checkEventData), the create-time state recorded.
	rows := readDB(t, e.db)
	src := rows.Events[sessKey{"app", "u", "s"}]
	require.Len(t, src, 4)
	for _, c := range []struct {
		nid  string
		want map[string]any
		n    int
	}{{"all", wantAll, 4}, {"before", wantBefore, 2}} {
		k := sessKey{"app", "u", c.nid}
		row, ok := rows.Sessions[k]
		require.True(t, ok, "sessions row of %s", c.nid)
		require.Equal(t, c.want, row.State, "sessions.state of %s", c.nid)
		require.Equal(t, events[c.n-1].Timestamp.UnixMicro(), row.UpdateUS, "sessions.update_time of %s", c.nid)
		got := rows.Events[k]
		require.Len(t, got, c.n, "events rows of %s", c.nid)
		for i, g := range got {
			require.Equal(t, [3]any{src[i].ID, src[i].InvocationID, src[i].US}, [3]any{g.ID, g.InvocationID, g.US}, "%s event %d", c.nid, i)
			require.JSONEq(t, src[i].Raw, g.Raw, "%s event %d: event_data as the forked session's row", c.nid, i)
			checkEventData(t, events[i], g)
		}
		var cs []byte
		require.NoError(t, e.db.QueryRow(`SELECT create_state FROM adksession_sessions WHERE app_name = 'app' AND user_id = 'u' AND session_id = $1`,
			c.nid).Scan(&cs))
		require.JSONEq(t, `{"c": 4, "keep": "k", "orig": "o"}`, string(cs), "the create-time state of %s is the forked session's", c.nid)
	}

	// Cold reads of the forks, once Redis lost everything.
	e.wipeNamespace()
	check("all", wantAll, 4, "cold")
	check("before", wantBefore, 2, "cold")

	// The session forked from only in the database (Redis wiped: the loader
	// puts back its newest two events, the older are the database's).
	e.wipeNamespace()
	fork("cold-all", "")
	e.flush(e.svc)
	e.wipeNamespace()
	fork("cold-before", "inv2")
	check("cold-all", wantAll, 4, "forked cold")
	check("cold-before", wantBefore, 2, "forked cold")
	// A rewind of the cold fork restores its (the forked session's) create-time state.
	ev, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "cold-before", BeforeInvocationID: "inv1"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"c": 4.0, "keep": "k", "x": nil, "y": nil}, ev.Actions.StateDelta)

	// An id only the database holds is taken: refused, nothing written.
	e.flush(e.svc)
	e.wipeNamespace()
	before := readDB(t, e.db)
	_, err = e.svc.Fork(ctx, &service.ForkRequest{AppName: "app", UserID: "u", SessionID: "s", NewSessionID: "all"})
	require.ErrorIs(t, err, service.ErrAlreadyExists)
	require.ErrorContains(t, err, "session all of app app, user u")
	require.Zero(t, e.rdb.Exists(ctx, e.keys.Session("app", "u", "all").Session).Val(), "the taken id is not written")
	b, err := e.svc.Backlog(ctx)
	require.NoError(t, err)
	require.Zero(t, b.Entries, "nothing logged")
	e.flush(e.svc)
	require.Equal(t, before, readDB(t, e.db), "the database is unchanged")

	// The forks' rows are the warm forks' rows, but for the session id.
	rows = readDB(t, e.db)
	for _, pair := range [][2]string{{"all", "cold-all"}, {"before", "cold-before"}} {
		warm, cold := rows.Events[sessKey{"app", "u", pair[0]}], rows.Events[sessKey{"app", "u", pair[1]}]
		require.Equal(t, warm, cold[:len(warm)], "%s and %s", pair[0], pair[1])
	}
	var raw json.RawMessage
	require.NoError(t, e.db.QueryRow(`SELECT state FROM sessions WHERE app_name = 'app' AND user_id = 'u' AND id = 'cold-all'`).Scan(&raw))
	require.JSONEq(t, `{"c": 7, "keep": null, "orig": "o", "x": null, "y": 2, "z": 3}`, string(raw))
}
