package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service/httpapi"
)

// TestUncleanPathsNotRedirected (found by FuzzRequest): a path with an
// empty, "." or ".." segment was redirected (307, method and body kept) to
// the cleaned path, where POST .../sessions//events created a session
// named "events". It is 404 now and nothing is written; ids "." and ".."
// work escaped.
func TestUncleanPathsNotRedirected(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		for _, c := range []struct{ path, wouldCreate string }{
			{base + "//events", "events"},
			{base + "/./rewind", "rewind"},
			{base + "/x/../events", "events"},
			{base + "/x/..", "x"},
		} {
			r := s.do(t, "POST", c.path, map[string]any{"author": "a", "beforeInvocationId": "i"})
			require.Equal(t, http.StatusNotFound, r.code, "%s: %s", c.path, r.body)
			require.Empty(t, r.header.Get("Location"), c.path)
			r.errorMessage(t)
			s.requireAbsent(t, c.wouldCreate, c.path)
		}
		for _, id := range []string{".", ".."} {
			r := s.do(t, "POST", base+"/%2E"+map[string]string{".": "", "..": "%2E"}[id], map[string]any{"k": id})
			require.Equal(t, http.StatusOK, r.code, "%s: %s", id, r.body)
			require.NotNil(t, s.stored(t, id), id)
		}
	})
}
