package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

const base = "/apps/app1/users/u1/sessions"

func TestCreateGetDelete(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})

		// POST .../sessions/{id}: the body is the initial state, as ADK's api_server.
		r := s.do(t, "POST", base+"/s1", map[string]any{"k": "v", "user:lang": "fr", "app:ver": 2, "temp:t": 1})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		var sess sessionJSON
		r.json(t, &sess)
		require.Equal(t, "s1", sess.ID)
		require.Equal(t, "app1", sess.AppName)
		require.Equal(t, "u1", sess.UserID)
		require.Equal(t, map[string]any{"k": "v", "user:lang": "fr", "app:ver": float64(2)}, sess.State)
		require.Empty(t, sess.Events)
		require.Regexp(t, `^\d{10}\.\d{6}$`, sess.LastUpdateTime.String())
		require.NotEmpty(t, r.header.Get("ETag"))

		// The same id again is a conflict.
		r = s.do(t, "POST", base+"/s1", nil)
		require.Equal(t, http.StatusConflict, r.code)
		require.Contains(t, r.errorMessage(t), "s1")

		// POST .../sessions: ADK's CreateSessionRequest, events appended in order.
		r = s.do(t, "POST", base, map[string]any{
			"sessionId": "s2", "state": map[string]any{"a": 1},
			"events": []any{
				map[string]any{"author": "user", "invocationId": "i1", "content": map[string]any{"role": "user", "parts": []any{map[string]any{"text": "hello"}}}},
				map[string]any{"author": "agent", "invocationId": "i1", "actions": map[string]any{"stateDelta": map[string]any{"a": 2}}},
			},
		})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		r.json(t, &sess)
		require.Equal(t, "s2", sess.ID)
		require.Equal(t, float64(2), sess.State["a"])
		evs := sess.events(t)
		require.Len(t, evs, 2)
		require.Equal(t, "hello", evs[0].Content["parts"].([]any)[0].(map[string]any)["text"])
		require.NotEmpty(t, evs[0].ID)

		// No body at all: a generated id.
		r = s.do(t, "POST", base, nil)
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		r.json(t, &sess)
		require.Len(t, sess.ID, 36)

		// Get, then the same session under another user or app is not found.
		r = s.do(t, "GET", base+"/s2", nil)
		require.Equal(t, http.StatusOK, r.code)
		r.json(t, &sess)
		require.Len(t, sess.Events, 2)
		for _, p := range []string{"/apps/app1/users/u2/sessions/s2", "/apps/app2/users/u1/sessions/s2", base + "/nope"} {
			r = s.do(t, "GET", p, nil)
			require.Equal(t, http.StatusNotFound, r.code, p)
			r.errorMessage(t)
			r = s.do(t, "DELETE", p, nil)
			require.Equal(t, http.StatusNoContent, r.code, p)
		}
		r = s.do(t, "GET", base+"/s2", nil)
		require.Equal(t, http.StatusOK, r.code, "a delete under another user removed the session")

		// User state: keys without the prefix.
		r = s.do(t, "GET", "/apps/app1/users/u1/state", nil)
		require.Equal(t, http.StatusOK, r.code)
		var us map[string]any
		r.json(t, &us)
		require.Equal(t, map[string]any{"lang": "fr"}, us)

		r = s.do(t, "DELETE", base+"/s2", nil)
		require.Equal(t, http.StatusNoContent, r.code)
		r = s.do(t, "GET", base+"/s2", nil)
		require.Equal(t, http.StatusNotFound, r.code)
	})
}

func TestGetWindows(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/w", nil).code)
		var stamps []string
		for i := range 6 {
			r := s.do(t, "POST", base+"/w/events", map[string]any{
				"author": "user", "invocationId": "i", "timestamp": 1700000000 + i,
				"actions": map[string]any{"stateDelta": map[string]any{"n": i}},
			})
			require.Equal(t, http.StatusOK, r.code, "%s", r.body)
			var ev eventJSON
			r.json(t, &ev)
			stamps = append(stamps, ev.Timestamp.String())
		}
		count := func(query string) (int, sessionJSON) {
			r := s.do(t, "GET", base+"/w?"+query, nil)
			require.Equal(t, http.StatusOK, r.code, "%s: %s", query, r.body)
			var sess sessionJSON
			r.json(t, &sess)
			return len(sess.Events), sess
		}
		n, sess := count("numRecentEvents=2")
		require.Equal(t, 2, n)
		require.Equal(t, float64(5), sess.State["n"], "state is the full state whatever the window")
		require.Equal(t, stamps[5], sess.events(t)[1].Timestamp.String())
		n, _ = count("afterTimestamp=" + stamps[3]) // inclusive
		require.Equal(t, 3, n)
		n, sess = count("afterTimestamp=" + stamps[1] + "&numRecentEvents=2")
		require.Equal(t, 2, n)
		require.Equal(t, stamps[4], sess.events(t)[0].Timestamp.String())
		n, _ = count("")
		require.Equal(t, 6, n)

		for _, q := range []string{"numRecentEvents=-1", "numRecentEvents=x", "afterTimestamp=yesterday"} {
			r := s.do(t, "GET", base+"/w?"+q, nil)
			require.Equal(t, http.StatusBadRequest, r.code, q)
			r.errorMessage(t)
		}
	})
}

func TestListPages(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		want := map[string]bool{}
		for i := range 5 {
			id := fmt.Sprintf("s%d", i)
			want[id] = true
			require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/"+id, map[string]any{"i": i}).code)
		}
		require.Equal(t, http.StatusOK, s.do(t, "POST", "/apps/app1/users/other/sessions/x", nil).code)
		got := map[string]bool{}
		token, pages := "", 0
		for {
			r := s.do(t, "GET", base+"?pageSize=2&pageToken="+url.QueryEscape(token), nil)
			require.Equal(t, http.StatusOK, r.code, "%s", r.body)
			var page []sessionJSON
			r.json(t, &page)
			require.LessOrEqual(t, len(page), 2)
			for _, sess := range page {
				require.False(t, got[sess.ID], "session %s listed twice", sess.ID)
				got[sess.ID] = true
				require.Equal(t, "u1", sess.UserID)
				require.Contains(t, sess.State, "i")
				require.Empty(t, sess.Events)
			}
			pages++
			if token = r.header.Get("X-Next-Page-Token"); token == "" {
				break
			}
		}
		require.Equal(t, want, got)
		require.Equal(t, 3, pages)
		r := s.do(t, "GET", base+"?pageToken=garbage", nil)
		require.Equal(t, http.StatusBadRequest, r.code)
	})
}

func TestAppendRevision(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		r := s.do(t, "POST", base+"/r", nil)
		require.Equal(t, http.StatusOK, r.code)
		etag0 := r.header.Get("ETag")

		// With the current revision: appended, and a new ETag.
		r = s.do(t, "POST", base+"/r/events", map[string]any{"author": "user", "actions": map[string]any{"stateDelta": map[string]any{"x": 1}}}, "If-Match", etag0)
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		etag1 := r.header.Get("ETag")
		require.NotEqual(t, etag0, etag1)
		var ev eventJSON
		r.json(t, &ev)
		require.NotEmpty(t, ev.ID)
		require.Equal(t, map[string]any{"x": float64(1)}, ev.Actions.StateDelta)

		// The old revision again: 409, nothing written.
		r = s.do(t, "POST", base+"/r/events", map[string]any{"author": "user", "actions": map[string]any{"stateDelta": map[string]any{"x": 2}}}, "If-Match", etag0)
		require.Equal(t, http.StatusConflict, r.code)
		require.Contains(t, r.errorMessage(t), "stale")

		// The revision as the session's lastUpdateTime, as a client reading the JSON has it.
		r = s.do(t, "GET", base+"/r", nil)
		var sess sessionJSON
		r.json(t, &sess)
		require.Len(t, sess.Events, 1)
		require.Equal(t, float64(1), sess.State["x"])
		require.Equal(t, etag1, r.header.Get("ETag"))
		r = s.do(t, "POST", base+"/r/events?lastUpdateTime="+sess.LastUpdateTime.String(), map[string]any{"author": "user"})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		r = s.do(t, "POST", base+"/r/events?lastUpdateTime="+sess.LastUpdateTime.String(), map[string]any{"author": "user"})
		require.Equal(t, http.StatusConflict, r.code)

		// Without a revision, concurrent appends all land.
		const n = 16
		var wg sync.WaitGroup
		codes := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = s.do(t, "POST", base+"/r/events", map[string]any{"author": "w", "actions": map[string]any{"stateDelta": map[string]any{fmt.Sprintf("k%d", i): i}}}).code
			}()
		}
		wg.Wait()
		for i, c := range codes {
			require.Equal(t, http.StatusOK, c, "append %d", i)
		}
		r = s.do(t, "GET", base+"/r", nil)
		r.json(t, &sess)
		require.Len(t, sess.Events, 2+n)
		for i := range n {
			require.Equal(t, float64(i), sess.State[fmt.Sprintf("k%d", i)])
		}

		// Appending to a session that does not exist.
		r = s.do(t, "POST", base+"/ghost/events", map[string]any{"author": "user"})
		require.Equal(t, http.StatusNotFound, r.code)
		r = s.do(t, "POST", base+"/r/events", "")
		require.Equal(t, http.StatusBadRequest, r.code)
		r = s.do(t, "POST", base+"/r/events", map[string]any{"author": "user"}, "If-Match", `"yesterday"`)
		require.Equal(t, http.StatusBadRequest, r.code)
	})
}

func TestPatchState(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/p", map[string]any{"a": 1}).code)
		r := s.do(t, "PATCH", base+"/p", map[string]any{"stateDelta": map[string]any{"a": 2, "user:u": true}})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		var sess sessionJSON
		r.json(t, &sess)
		require.Equal(t, map[string]any{"a": float64(2), "user:u": true}, sess.State)
		evs := sess.events(t)
		require.Len(t, evs, 1)
		require.True(t, strings.HasPrefix(evs[0].InvocationID, "p-"))
		require.Equal(t, "user", evs[0].Author)
		require.Equal(t, http.StatusBadRequest, s.do(t, "PATCH", base+"/p", map[string]any{}).code)
	})
}

func TestIDsNeedingEscapes(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		app, user, sid := "my app", "u:{1}", "a/b c"
		p := "/apps/" + url.PathEscape(app) + "/users/" + url.PathEscape(user) + "/sessions/" + url.PathEscape(sid)
		require.Equal(t, "/apps/my%20app/users/u:%7B1%7D/sessions/a%2Fb%20c", p)
		r := s.do(t, "POST", p, map[string]any{"x": 1})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		var sess sessionJSON
		r.json(t, &sess)
		require.Equal(t, []string{app, user, sid}, []string{sess.AppName, sess.UserID, sess.ID})
		r = s.do(t, "POST", p+"/events", map[string]any{"author": "user"})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		r = s.do(t, "GET", p, nil)
		require.Equal(t, http.StatusOK, r.code)
		r.json(t, &sess)
		require.Equal(t, sid, sess.ID)
		require.Len(t, sess.Events, 1)
	})
}

func TestBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{}, func(c *service.Config) { c.MaxEventBytes = 4096 })
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/b", nil).code)
		cases := []struct {
			name, method, path string
			body               any
			code               int
		}{
			{"bad JSON", "POST", base + "/b/events", `{"author":`, http.StatusBadRequest},
			{"two values", "POST", base + "/b2", `{} {}`, http.StatusBadRequest},
			{"a closing bracket after the value", "POST", base + "/b/events", `{"author":"a"}]`, http.StatusBadRequest},
			{"state not an object", "POST", base + "/b3", `[1,2]`, http.StatusBadRequest},
			{"id too long", "POST", base + "/" + strings.Repeat("x", 129), nil, http.StatusBadRequest},
			{"body over the limit", "POST", base + "/b/events", `{"author":"` + strings.Repeat("x", 4096+64<<10) + `"}`, http.StatusRequestEntityTooLarge},
			{"event over MaxEventBytes", "POST", base + "/b/events", map[string]any{"author": strings.Repeat("x", 5000)}, http.StatusBadRequest},
			{"no route", "GET", "/nowhere", nil, http.StatusNotFound},
		}
		for _, c := range cases {
			r := s.do(t, c.method, c.path, c.body)
			require.Equal(t, c.code, r.code, "%s: %s", c.name, r.body)
			r.errorMessage(t)
		}
		r := s.do(t, "GET", base+"/b", nil)
		var sess sessionJSON
		r.json(t, &sess)
		require.Empty(t, sess.Events, "a refused request wrote an event")
	})
}

func TestAuth(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{AuthToken: "s3cret"})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/a", nil).code)
		s.token = ""
		for _, p := range []string{base + "/a", base, "/apps/app1/users/u1/state", "/metrics", "/api/overview", "/api/session?app=app1&user=u1&id=a"} {
			r := s.do(t, "GET", p, nil)
			require.Equal(t, http.StatusUnauthorized, r.code, p)
			require.Equal(t, `Bearer realm="adksession"`, r.header.Get("WWW-Authenticate"))
			r.errorMessage(t)
		}
		s.token = "s3cre"
		require.Equal(t, http.StatusUnauthorized, s.do(t, "GET", base+"/a", nil).code)
		s.token = "s3cret2"
		require.Equal(t, http.StatusUnauthorized, s.do(t, "DELETE", base+"/a", nil).code)
		s.token = ""
		for _, p := range []string{"/healthz", "/readyz", "/", "/ui/app.js"} {
			require.Equal(t, http.StatusOK, s.do(t, "GET", p, nil).code, p)
		}
		s.token = "s3cret"
		require.Equal(t, http.StatusOK, s.do(t, "GET", base+"/a", nil).code)
	})
}

func TestRewind(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/rw", map[string]any{"keep": "created"}).code)
		for i, inv := range []string{"i1", "i2", "i2"} {
			r := s.do(t, "POST", base+"/rw/events", map[string]any{"author": "agent", "invocationId": inv,
				"actions": map[string]any{"stateDelta": map[string]any{"n": i, inv: true}}})
			require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		}
		r := s.do(t, "POST", base+"/rw/rewind", map[string]any{"beforeInvocationId": "i2"})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		var ev map[string]any
		r.json(t, &ev)
		require.Equal(t, "user", ev["author"])
		require.Equal(t, "i2", ev["actions"].(map[string]any)["rewindBeforeInvocationId"])
		etag := r.header.Get("ETag")

		r = s.do(t, "GET", base+"/rw", nil)
		require.Equal(t, etag, r.header.Get("ETag"))
		var sess sessionJSON
		r.json(t, &sess)
		require.Equal(t, map[string]any{"keep": "created", "n": float64(0), "i1": true, "i2": nil}, sess.State)
		require.Len(t, sess.Events, 4, "rewound events stay stored")

		// The dashboard's view marks the rewound events.
		r = s.do(t, "GET", "/api/session?app=app1&user=u1&id=rw", nil)
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		var in struct {
			Rewound []string `json:"rewound"`
		}
		r.json(t, &in)
		evs := sess.events(t)
		require.Equal(t, []string{evs[1].ID, evs[2].ID, evs[3].ID}, in.Rewound)

		require.Equal(t, http.StatusNotFound, s.do(t, "POST", base+"/rw/rewind", map[string]any{"beforeInvocationId": "nope"}).code)
		require.Equal(t, http.StatusNotFound, s.do(t, "POST", base+"/ghost/rewind", map[string]any{"beforeInvocationId": "i1"}).code)
		require.Equal(t, http.StatusBadRequest, s.do(t, "POST", base+"/rw/rewind", map[string]any{}).code)
	})
}

// TestRewindADKBody: ADK's body, snake_case or camelCase, rewinds and
// answers the session, as ADK's api_server.
func TestRewindADKBody(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		for n, body := range []map[string]any{
			{"rewind_before_invocation_id": "i2"},
			{"rewindBeforeInvocationId": "i2"},
			{"rewind_before_invocation_id": "i2", "beforeInvocationId": "i2"},
		} {
			sid := fmt.Sprint("adk-rw-", n)
			require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/"+sid, map[string]any{"keep": "created"}).code)
			for i, inv := range []string{"i1", "i2"} {
				r := s.do(t, "POST", base+"/"+sid+"/events", map[string]any{"author": "agent", "invocationId": inv,
					"actions": map[string]any{"stateDelta": map[string]any{"n": i, inv: true}}})
				require.Equal(t, http.StatusOK, r.code, "%s", r.body)
			}
			r := s.do(t, "POST", base+"/"+sid+"/rewind", body)
			require.Equal(t, http.StatusOK, r.code, "%v: %s", body, r.body)
			var sess sessionJSON
			r.json(t, &sess)
			require.Equal(t, sid, sess.ID, "%v", body)
			require.Equal(t, map[string]any{"keep": "created", "n": float64(0), "i1": true, "i2": nil}, sess.State, "%v", body)
			require.Len(t, sess.Events, 3, "%v", body)
			var last struct {
				Author  string
				Actions struct{ RewindBeforeInvocationID string }
			}
			require.NoError(t, json.Unmarshal(sess.Events[2], &last))
			require.Equal(t, "user", last.Author)
			require.Equal(t, "i2", last.Actions.RewindBeforeInvocationID, "%v", body)
			require.Equal(t, r.header.Get("ETag"), s.do(t, "GET", base+"/"+sid, nil).header.Get("ETag"))
		}
		r := s.do(t, "POST", base+"/nobody/rewind", map[string]any{"rewind_before_invocation_id": "i1", "beforeInvocationId": "i2"})
		require.Equal(t, http.StatusBadRequest, r.code)
		require.Contains(t, r.errorMessage(t), "differ")
		require.Equal(t, http.StatusNotFound, s.do(t, "POST", base+"/ghost/rewind", map[string]any{"rewindBeforeInvocationId": "i1"}).code)
	})
}

// TestCreateWithEvents: POST .../sessions with ADK's CreateSessionRequest
// appends its events in order (a partial one is not stored, as ADK's
// append_event) and answers the session with them, as given.
func TestCreateWithEvents(t *testing.T) {
	raw, err := os.ReadFile("../../persist/testdata/adk-python/api_answers.json")
	require.NoError(t, err)
	var answers map[string]struct {
		API struct{ Events []json.RawMessage } `json:"api_server"`
	}
	require.NoError(t, json.Unmarshal(raw, &answers))
	events := answers["py-u1/s-a"].API.Events
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		partial := json.RawMessage(`{"author":"agent","invocationId":"inv-x","partial":true,"content":{"parts":[{"text":"stre"}]}}`)
		body := map[string]any{"session_id": "with-events", "state": map[string]any{"s": 1},
			"events": []json.RawMessage{events[0], events[1], partial, events[2], events[3]}}
		r := s.do(t, "POST", base, body)
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		for _, got := range []response{r, s.do(t, "GET", base+"/with-events", nil)} {
			var sess sessionJSON
			got.json(t, &sess)
			require.Equal(t, "with-events", sess.ID)
			require.Len(t, sess.Events, 4)
			for i, want := range [][]byte{events[0], events[1], events[2], events[3]} {
				require.JSONEq(t, string(want), string(sess.Events[i]))
			}
			require.Equal(t, float64(1), sess.State["s"])
			require.Equal(t, float64(1), sess.State["turns"])
			require.Equal(t, "Paris", sess.State["user:last_city"])
		}
	})
}
