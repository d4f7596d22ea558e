package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service/httpapi"
)

// TestAppendRetry: a client that retries POST .../events after a lost reply
// (same event id) gets the stored event again, and the session holds it
// once; the same id for another event is 409 with nothing written.
func TestAppendRetry(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/retry", nil).code)
		ev := map[string]any{"id": "ev-1", "invocationId": "i1", "author": "agent",
			"actions": map[string]any{"stateDelta": map[string]any{"n": 1}}}
		first := s.do(t, "POST", base+"/retry/events", ev)
		require.Equal(t, http.StatusOK, first.code, "%s", first.body)
		var stored, again eventJSON
		first.json(t, &stored)

		second := s.do(t, "POST", base+"/retry/events", ev)
		require.Equal(t, http.StatusOK, second.code, "%s", second.body)
		second.json(t, &again)
		require.Equal(t, stored.ID, again.ID)
		require.Equal(t, stored.Timestamp, again.Timestamp, "the stored timestamp")

		other := map[string]any{"id": "ev-1", "invocationId": "i1", "author": "someone else"}
		conflict := s.do(t, "POST", base+"/retry/events", other)
		require.Equal(t, http.StatusConflict, conflict.code, "%s", conflict.body)
		require.Contains(t, conflict.errorMessage(t), "ev-1")

		var sess sessionJSON
		got := s.do(t, "GET", base+"/retry", nil)
		got.json(t, &sess)
		require.Len(t, sess.events(t), 1)
		require.Equal(t, "agent", sess.events(t)[0].Author)
	})
}
