package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service/httpapi"
)

// TestRefusedConnectionsClose: a request refused before any work (no
// token: 401; a foreign Host or Origin: 403) is answered with Connection:
// close and the server closes the connection, so that a client without the
// token cannot keep connections idle; an authenticated keep-alive connection
// serves a second request.
func TestRefusedConnectionsClose(t *testing.T) {
	t.Parallel()
	testenv.EachRedis(t, func(t *testing.T, url string) {
		s := newAPIServer(t, url, httpapi.Options{AuthToken: "secret"})
		addr := s.Listener.Addr().String()
		dial := func() (net.Conn, *bufio.Reader) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		}
		// roundTrip sends a raw request on c and reads its answer.
		roundTrip := func(c net.Conn, br *bufio.Reader, host, headers string) *http.Response {
			_, err := fmt.Fprintf(c, "GET /apps/a/users/u/sessions HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, headers)
			require.NoError(t, err)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			return resp
		}
		for _, c := range []struct {
			name, host, headers string
			code                int
		}{
			{"no token", "127.0.0.1", "", http.StatusUnauthorized},
			{"wrong token", "127.0.0.1", "Authorization: Bearer nope\r\n", http.StatusUnauthorized},
			{"foreign Host", "evil.example", "Authorization: Bearer secret\r\n", http.StatusForbidden},
			{"foreign Origin", "127.0.0.1", "Origin: https://evil.example\r\n", http.StatusForbidden},
		} {
			conn, br := dial()
			resp := roundTrip(conn, br, c.host, c.headers)
			require.Equal(t, c.code, resp.StatusCode, c.name)
			require.True(t, resp.Close, "%s: no Connection: close", c.name)
			// Bounds the test only: the server closes at once (io.EOF).
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
			_, err := br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "%s: the server kept the connection open", c.name)
		}

		conn, br := dial()
		for i := range 2 {
			resp := roundTrip(conn, br, "127.0.0.1", "Authorization: Bearer secret\r\n")
			require.Equal(t, http.StatusOK, resp.StatusCode, "authenticated request %d on one connection", i)
			require.False(t, resp.Close)
		}
	}, testenv.Embedded)
}
