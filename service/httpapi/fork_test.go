package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service/httpapi"
)

// TestFork: POST .../sessions/{id}/fork, snake_case or camelCase, answers
// 201 with the new session (the events before the invocation, the state of
// that point), which a GET then reads; refusals map to 400, 404 and 409.
func TestFork(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/src", map[string]any{"keep": "created"}).code)
		for i, inv := range []string{"i1", "i1", "i2"} {
			r := s.do(t, "POST", base+"/src/events", map[string]any{"author": "agent", "invocationId": inv,
				"actions": map[string]any{"stateDelta": map[string]any{"n": i, inv: true}}})
			require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		}
		var src sessionJSON
		r := s.do(t, "GET", base+"/src", nil)
		r.json(t, &src)

		for _, c := range []struct {
			body   map[string]any
			nid    string
			events int
			state  map[string]any
		}{
			{map[string]any{"new_session_id": "f1", "before_invocation_id": "i2"}, "f1", 2, map[string]any{"keep": "created", "n": 1.0, "i1": true}},
			{map[string]any{"newSessionId": "f2", "beforeInvocationId": "i2"}, "f2", 2, map[string]any{"keep": "created", "n": 1.0, "i1": true}},
			{map[string]any{"new_session_id": "f3", "newSessionId": "f3"}, "f3", 3, map[string]any{"keep": "created", "n": 2.0, "i1": true, "i2": true}},
			{map[string]any{}, "", 3, map[string]any{"keep": "created", "n": 2.0, "i1": true, "i2": true}},
		} {
			r := s.do(t, "POST", base+"/src/fork", c.body)
			require.Equal(t, http.StatusCreated, r.code, "%v: %s", c.body, r.body)
			var got sessionJSON
			r.json(t, &got)
			if c.nid == "" {
				_, err := uuid.Parse(got.ID)
				require.NoError(t, err, "an empty new_session_id gets a UUID: %q", got.ID)
			} else {
				require.Equal(t, c.nid, got.ID)
			}
			require.Equal(t, "app1", got.AppName)
			require.Equal(t, "u1", got.UserID)
			require.Equal(t, c.state, got.State, "%v", c.body)
			require.Equal(t, src.Events[:c.events], got.Events, "%v: the events, ids and timestamps kept", c.body)
			require.Equal(t, r.header.Get("ETag"), s.do(t, "GET", base+"/"+got.ID, nil).header.Get("ETag"))
			var read sessionJSON
			s.do(t, "GET", base+"/"+got.ID, nil).json(t, &read)
			require.Equal(t, got, read, "a GET reads the fork as the fork answered it")
		}
		var last struct {
			LastUpdateTime json.Number `json:"lastUpdateTime"`
		}
		s.do(t, "GET", base+"/f1", nil).json(t, &last)
		require.Equal(t, src.events(t)[1].Timestamp, last.LastUpdateTime, "the time of its last event")

		for _, c := range []struct {
			path string
			body any
			code int
			msg  string
		}{
			{base + "/src/fork", map[string]any{"new_session_id": "f1"}, http.StatusConflict, "already exists: session f1"},
			{base + "/src/fork", map[string]any{"new_session_id": "f9", "before_invocation_id": "nope"}, http.StatusNotFound, "invocation nope"},
			{base + "/ghost/fork", map[string]any{"new_session_id": "f9"}, http.StatusNotFound, "session ghost"},
			{base + "/src/fork", map[string]any{"new_session_id": "a", "newSessionId": "b"}, http.StatusBadRequest, `new_session_id "a" and newSessionId "b" differ`},
			{base + "/src/fork", map[string]any{"before_invocation_id": "i1", "beforeInvocationId": "i2"}, http.StatusBadRequest, `before_invocation_id "i1" and beforeInvocationId "i2" differ`},
			{base + "/src/fork", `{"new_session_id": 5}`, http.StatusBadRequest, "request body"},
			{base + "/src/fork", map[string]any{"new_session_id": "a\x00b"}, http.StatusBadRequest, "NewSessionID: contains NUL"},
		} {
			r := s.do(t, "POST", c.path, c.body)
			require.Equal(t, c.code, r.code, "%v: %s", c.body, r.body)
			require.Contains(t, r.errorMessage(t), c.msg, "%v", c.body)
		}
		require.Equal(t, http.StatusNotFound, s.do(t, "GET", base+"/f9", nil).code, "a refused fork made nothing")
	})
}
