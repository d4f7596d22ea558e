package integration

// Rows ADK Python wrote are served as ADK's api_server serves them (docs/persistence.md, "What ADK can read"):
// persist/testdata/adk-python holds the rows ADK Python main (bb56aa56) wrote
// for every kind of event and what its api_server answered for each session.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

const adkPythonFixture = "../persist/testdata/adk-python/"

// TestADKPythonRows loads ADK Python's rows into a migrated database and
// reads every session cold (nothing in Redis) through the library and over
// HTTP: each answer is the JSON ADK's api_server gave, event by event.
func TestADKPythonRows(t *testing.T) {
	t.Parallel()
	ctx := wbCtx(t)
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(ctx, dbURL))
	testenv.ExecSQLFile(t, dbURL, adkPythonFixture+"rows.sql")

	raw, err := os.ReadFile(adkPythonFixture + "api_answers.json")
	require.NoError(t, err)
	var answers map[string]struct {
		API json.RawMessage `json:"api_server"`
	}
	require.NoError(t, json.Unmarshal(raw, &answers))

	// Two services on their own namespaces: both read cold.
	open := func() *service.Service {
		svc, err := service.Open(ctx, service.Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL,
			Namespace: testenv.UniqueName(t, "adkpy-") + ":", DisableFlusher: true})
		require.NoError(t, err)
		t.Cleanup(func() { svc.Close(ctx) })
		return svc
	}
	lib := open()
	srv := httptest.NewServer(httpapi.New(open(), httpapi.Options{}))
	defer srv.Close()

	kinds := map[string]bool{}
	for name, want := range answers {
		user, sid, _ := strings.Cut(name, "/")
		resp, err := lib.Get(ctx, &service.GetRequest{AppName: "adkpy-py", UserID: user, SessionID: sid})
		require.NoError(t, err, name)
		sameAnswer(t, name+" (library)", want.API, sessionAnswer(t, resp.Session), kinds)

		r, err := http.Get(srv.URL + "/apps/adkpy-py/users/" + user + "/sessions/" + sid)
		require.NoError(t, err)
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.StatusCode, string(body))
		sameAnswer(t, name+" (HTTP)", want.API, body, kinds)
	}
	got := make([]string, 0, len(kinds))
	for k := range kinds {
		got = append(got, k)
	}
	sort.Strings(got)
	require.Len(t, got, 27, "kinds of events compared: %v", got)
}

// sessionAnswer is a session as the HTTP API writes it, from the library.
func sessionAnswer(t *testing.T, s *service.Session) []byte {
	events := make([]*service.Event, 0, s.Events().Len())
	for ev := range s.Events().All() {
		events = append(events, ev)
	}
	state := map[string]any{}
	for k, v := range s.State().All() {
		state[k] = v
	}
	b, err := json.Marshal(map[string]any{"id": s.ID(), "appName": s.AppName(), "userId": s.UserID(), "state": state,
		"events": events, "lastUpdateTime": float64(s.LastUpdateTime().UnixMicro()) / 1e6})
	require.NoError(t, err)
	return b
}

// sameAnswer compares a session answer with ADK's: the session's fields,
// then each event by id (the kind of event is the id's suffix).
func sameAnswer(t *testing.T, what string, want, got []byte, kinds map[string]bool) {
	t.Helper()
	var w, g map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(want, &w))
	require.NoError(t, json.Unmarshal(got, &g), what)
	var we, ge []json.RawMessage
	require.NoError(t, json.Unmarshal(w["events"], &we))
	require.NoError(t, json.Unmarshal(g["events"], &ge), what)
	require.Len(t, ge, len(we), what)
	for i := range we {
		var id struct{ ID string }
		require.NoError(t, json.Unmarshal(we[i], &id))
		require.JSONEq(t, string(we[i]), string(ge[i]), "%s: event %s", what, id.ID)
		_, kind, _ := strings.Cut(id.ID, "-ev-")
		kinds[kind] = true
	}
	delete(w, "events")
	delete(g, "events")
	wb, _ := json.Marshal(w)
	gb, _ := json.Marshal(g)
	require.JSONEq(t, string(wb), string(gb), "%s: session fields", what)
}
