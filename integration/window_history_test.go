package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/session"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/adkgo"
	"github.com/adksession/adksession/service/httpapi"
)

// windowLayer is a way to read a session with a window of its events and
// to append through what that read gave: a *service.Session of the library,
// the ETag of an HTTP GET, an adk-go session.Session of the adapter.
type windowLayer struct {
	name string
	// read reads session sid with window w and returns what append takes.
	read func(t *testing.T, sid string, w historyWindow) any
	// append appends an event of invocation inv with delta through h and
	// returns the event's id.
	append func(t *testing.T, h any, sid, inv string, delta map[string]any) string
	// rewind rewinds sid before invocation inv and returns the rewind
	// event's id.
	rewind func(t *testing.T, sid, inv string) string
	// catchesUp: with Config.ConcurrentAppends, a handle read before the
	// rewind appends (and is brought up to date) rather than being stale.
	// HTTP's If-Match is stale whatever the Config.
	catchesUp bool
}

// historyWindow is a window of a read: NumRecentEvents, and After, the
// timestamp of the history's event at index after (-1: none; len: later
// than every event); or the compacted view (Compacted).
type historyWindow struct {
	name      string
	num       int
	after     int
	compacted bool
}

// TestWindowedReadsKeepTheHistory: appending and rewinding through a
// handle read with a window (NumRecentEvents, After) or the compacted view
// (Compacted: the history holds a compaction), through the library,
// the HTTP API and the adk-go adapter, with Redis holding the whole session,
// only its newest events (MaxCachedEvents), or nothing of it (lost before
// the read, or between the read and the append), and with a handle read
// before the rewind brought up to date (ConcurrentAppends), keeps every event and
// every state key, in Get of the whole session, in a cold read and in the
// database's rows: a windowed read is never taken for the stored history.
func TestWindowedReadsKeepTheHistory(t *testing.T) {
	t.Parallel()
	windows := []historyWindow{
		{"newest 1", 1, -1, false}, {"newest 3", 3, -1, false}, {"after the 4th", 0, 3, false},
		{"newest 1 after the 2nd", 1, 1, false}, {"after every event", 0, 6, false},
		{"compacted", 0, -1, true},
	}
	losses := []string{"none", "before the read", "between the read and the append"}
	for _, cfg := range []struct {
		maxCached  int
		concurrent bool
	}{{0, false}, {2, false}, {2, true}} {
		t.Run(fmt.Sprintf("MaxCachedEvents %d, ConcurrentAppends %v", cfg.maxCached, cfg.concurrent), func(t *testing.T) {
			t.Parallel()
			e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
				c.MaxCachedEvents, c.ConcurrentAppends = cfg.maxCached, cfg.concurrent
			})
			for li, layer := range windowLayers(t, e) {
				for wi, w := range windows {
					for xi, loss := range losses {
						sid := fmt.Sprintf("s-%d-%d-%d", li, wi, xi)
						t.Run(layer.name+"/"+w.name+"/loss "+loss, func(t *testing.T) {
							checkWindowedHistory(t, e, layer, sid, w, loss, cfg.concurrent && layer.catchesUp)
						})
					}
				}
			}
		})
	}
}

// checkWindowedHistory runs the scenario of TestWindowedReadsKeepTheHistory
// on a session of its own.
// With stale, the last append goes through the handle read before the
// rewind (Config.ConcurrentAppends brings it up to date), otherwise through
// a handle read again with the window.
func checkWindowedHistory(t *testing.T, e *wbEnv, layer windowLayer, sid string, w historyWindow, loss string, stale bool) {
	ctx := wbCtx(t)
	const app, user = "app", "u"
	created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid})
	require.NoError(t, err)
	sess := created.Session
	var ids []string
	var history []*service.Event
	for i, d := range []struct {
		inv   string
		delta map[string]any
	}{
		{"inv1", map[string]any{"c": 1, "k1": 1, "user:u": 1}},
		{"inv1", map[string]any{"c": 2, "k2": 2}},
		{"inv2", map[string]any{"c": 3, "k3": 3, "app:a": 3}},
		{"cinv", nil}, // ADK Python's compaction of inv1: the compacted view leaves its events out
		{"inv3", map[string]any{"c": 4, "k4": 4}},
		{"inv3", map[string]any{"c": 5, "k5": 5}},
	} {
		ev := &service.Event{InvocationID: d.inv, Author: "agent", Actions: service.EventActions{StateDelta: d.delta},
			Content: json.RawMessage(fmt.Sprintf(`{"role":"model","parts":[{"text":"event %d"}]}`, i+1))}
		if d.inv == "cinv" {
			ev = &service.Event{InvocationID: d.inv, Author: "user", Actions: service.EventActions{Compaction: json.RawMessage(fmt.Sprintf(
				`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"events 1 and 2"}]}}`,
				epochSeconds(history[0].Timestamp), epochSeconds(history[1].Timestamp)))}}
		}
		require.NoError(t, e.svc.AppendEvent(ctx, sess, ev))
		ids, history = append(ids, ev.ID), append(history, ev)
	}
	e.flush(e.svc)
	if w.after >= 0 {
		if w.after < len(history) {
			w.after = int(history[w.after].Timestamp.UnixMicro())
		} else {
			w.after = int(time.Now().Add(time.Hour).UnixMicro())
		}
	}
	lose := func() {
		k := e.sessionKeys(app, user, sid)
		require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
	}

	if loss == "before the read" {
		lose()
	}
	h := layer.read(t, sid, w)
	if loss == "between the read and the append" {
		lose()
	}
	ids = append(ids, layer.append(t, h, sid, "inv4", map[string]any{"a": 1, "c": 6, "user:u": 2}))
	ids = append(ids, layer.rewind(t, sid, "inv3"))
	if loss != "none" {
		e.flush(e.svc)
		lose()
	}
	if !stale {
		h = layer.read(t, sid, w)
	}
	ids = append(ids, layer.append(t, h, sid, "inv5", map[string]any{"b": 1}))

	wantSession := map[string]any{"c": 3.0, "k1": 1.0, "k2": 2.0, "k3": 3.0, "k4": nil, "k5": nil, "a": nil, "b": 1.0}
	want := map[string]any{"user:u": 2.0, "app:a": 3.0}
	for k, v := range wantSession {
		want[k] = v
	}
	whole := func(why string) {
		t.Helper()
		got, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
		require.NoError(t, err)
		var gotIDs []string
		for ev := range got.Session.Events().All() {
			gotIDs = append(gotIDs, ev.ID)
		}
		require.Equal(t, ids, gotIDs, "%s: every event", why)
		require.Equal(t, want, stateMap(got.Session), "%s: every key", why)
	}
	whole("Get")
	e.flush(e.svc)
	rows := readDB(t, e.db)
	k := sessKey{app, user, sid}
	var rowIDs []string
	for _, r := range rows.Events[k] {
		rowIDs = append(rowIDs, r.ID)
	}
	require.Equal(t, ids, rowIDs, "the database's events")
	require.Equal(t, wantSession, rows.Sessions[k].State, "the database's session state")
	require.Equal(t, map[string]any{"u": 2.0}, rows.Users[[2]string{app, user}])
	require.Equal(t, map[string]any{"a": 3.0}, rows.Apps[app])
	lose()
	whole("a cold Get")
}

// windowLayers are the library, the HTTP API and the adk-go adapter (with
// its own handles and with another service's) over e's service.
func windowLayers(t *testing.T, e *wbEnv) []windowLayer {
	const app, user = "app", "u"
	ctx := wbCtx(t)
	libRewind := func(t *testing.T, sid, inv string) string {
		ev, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: app, UserID: user, SessionID: sid, BeforeInvocationID: inv})
		require.NoError(t, err)
		return ev.ID
	}
	after := func(w historyWindow) time.Time {
		if w.after < 0 {
			return time.Time{}
		}
		return time.UnixMicro(int64(w.after)).UTC()
	}

	srv := httptest.NewServer(httpapi.New(e.svc, httpapi.Options{}))
	t.Cleanup(srv.Close)
	path := func(sid string) string {
		return srv.URL + "/apps/" + app + "/users/" + user + "/sessions/" + url.PathEscape(sid)
	}
	send := func(t *testing.T, method, u, body string, header ...string) (http.Header, []byte) {
		code, h, b := sendJSON(ctx, t, method, u, body, header...)
		require.Equal(t, http.StatusOK, code, "%s %s: %s", method, u, b)
		return h, b
	}
	idOf := func(t *testing.T, b []byte) string {
		var ev struct{ ID string }
		require.NoError(t, json.Unmarshal(b, &ev))
		require.NotEmpty(t, ev.ID, "%s", b)
		return ev.ID
	}

	adk, mem := adkgo.New(e.svc), session.InMemoryService()
	adkView := adkgo.NewWithConfig(e.svc, adkgo.Config{CompactedGets: true})
	adkAppend := func(t *testing.T, h any, sid, inv string, delta map[string]any) string {
		ev := &session.Event{InvocationID: inv, Author: "agent", Actions: session.EventActions{StateDelta: delta}}
		require.NoError(t, adk.AppendEvent(ctx, h.(session.Session), ev))
		return ev.ID
	}
	return []windowLayer{{
		name: "library",
		read: func(t *testing.T, sid string, w historyWindow) any {
			got, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, NumRecentEvents: w.num, After: after(w), Compacted: w.compacted})
			require.NoError(t, err)
			return got.Session
		},
		append: func(t *testing.T, h any, sid, inv string, delta map[string]any) string {
			ev := &service.Event{InvocationID: inv, Author: "agent", Actions: service.EventActions{StateDelta: delta}}
			require.NoError(t, e.svc.AppendEvent(ctx, h.(*service.Session), ev))
			return ev.ID
		},
		rewind:    libRewind,
		catchesUp: true,
	}, {
		name: "HTTP",
		read: func(t *testing.T, sid string, w historyWindow) any {
			q := url.Values{}
			if w.num > 0 {
				q.Set("numRecentEvents", strconv.Itoa(w.num))
			}
			if w.after >= 0 {
				q.Set("afterTimestamp", fmt.Sprintf("%d.%06d", w.after/1e6, w.after%1e6))
			}
			if w.compacted {
				q.Set("compacted", "true")
			}
			h, _ := send(t, http.MethodGet, path(sid)+"?"+q.Encode(), "")
			return h.Get("ETag")
		},
		append: func(t *testing.T, h any, sid, inv string, delta map[string]any) string {
			body, err := json.Marshal(map[string]any{"invocationId": inv, "author": "agent", "actions": map[string]any{"stateDelta": delta}})
			require.NoError(t, err)
			_, b := send(t, http.MethodPost, path(sid)+"/events", string(body), "If-Match", h.(string))
			return idOf(t, b)
		},
		rewind: func(t *testing.T, sid, inv string) string {
			_, b := send(t, http.MethodPost, path(sid)+"/rewind", `{"beforeInvocationId":"`+inv+`"}`)
			return idOf(t, b)
		},
	}, {
		name: "adk-go",
		read: func(t *testing.T, sid string, w historyWindow) any {
			reader := adk
			if w.compacted {
				reader = adkView
			}
			got, err := reader.Get(ctx, &session.GetRequest{AppName: app, UserID: user, SessionID: sid, NumRecentEvents: w.num, After: after(w)})
			require.NoError(t, err)
			return got.Session
		},
		append:    adkAppend,
		rewind:    libRewind,
		catchesUp: true,
	}, {
		// A handle of another session.Service: the adapter appends through a
		// read of its own, of the newest event.
		name: "adk-go, another service's handle",
		read: func(t *testing.T, sid string, _ historyWindow) any {
			got, err := mem.Get(ctx, &session.GetRequest{AppName: app, UserID: user, SessionID: sid})
			if err != nil {
				created, err := mem.Create(ctx, &session.CreateRequest{AppName: app, UserID: user, SessionID: sid})
				require.NoError(t, err)
				return created.Session
			}
			return got.Session
		},
		append:    adkAppend,
		rewind:    libRewind,
		catchesUp: true,
	}}
}

// sendJSON sends body (JSON) to u with the header's name, value pairs and
// reads the answer.
func sendJSON(ctx context.Context, t *testing.T, method, u, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}
