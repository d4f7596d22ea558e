package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// stored reads session app1/u1/id straight from the service (nil when it
// does not exist), to check what a refused request did not write.
func (s *apiServer) stored(t *testing.T, id string) *service.Session {
	t.Helper()
	resp, err := s.svc.Get(context.Background(), &service.GetRequest{AppName: "app1", UserID: "u1", SessionID: id})
	if errors.Is(err, service.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return resp.Session
}

// requireAbsent fails unless session app1/u1/id does not exist.
func (s *apiServer) requireAbsent(t *testing.T, id, why string) {
	t.Helper()
	require.Nil(t, s.stored(t, id), "%s: the refused request created session %s", why, id)
}

// requireEvents fails unless session app1/u1/id holds n events.
func (s *apiServer) requireEvents(t *testing.T, id string, n int, why string) {
	t.Helper()
	sess := s.stored(t, id)
	require.NotNil(t, sess, "%s: session %s is gone", why, id)
	require.Equal(t, n, sess.Events().Len(), "%s: events of session %s", why, id)
}

// request builds a request to the test server; header is name, value pairs.
func (s *apiServer) request(t *testing.T, method, path string, body io.Reader, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

// raw sends a request written by hand (for what the Go client does not
// send, like an empty chunked body) and returns the status.
func (s *apiServer) raw(t *testing.T, request string) int {
	t.Helper()
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, strings.ReplaceAll(request, "HOST", u.Host))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}
