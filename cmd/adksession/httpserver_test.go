package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// closedByServer waits until the server closes c: reads end with EOF (or a
// reset) within bound, never with bound's timeout.
func closedByServer(t *testing.T, c net.Conn, bound time.Duration, what string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(bound)))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok {
		require.False(t, ne.Timeout(), "%s: the server kept the connection open", what)
	}
}

func dialServer(t *testing.T, srv *server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// authedCall is a request with the bearer token on a connection of its
// own (the tests' idle timeouts close kept-alive ones under the client).
func authedCall(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	code, b, err := tryAuthedCall(method, url, token, body)
	require.NoError(t, err)
	return code, b
}

// tryAuthedCall is authedCall for goroutines other than the test's.
func tryAuthedCall(method, url, token, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestServeConnectionTimeouts: every connection has read, write and idle
// timeouts (set low here): a client that sends nothing, part of its headers,
// part of its body, nothing after its answer, or that does not read its
// answer, is closed by the server; so is one refused for its token.
func TestServeConnectionTimeouts(t *testing.T) {
	t.Parallel()
	f := embeddedFlags(t.TempDir())
	f.authToken = "t"
	f.http.readHeaderTimeout, f.http.readTimeout, f.http.idleTimeout = 200*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
	var out bytes.Buffer
	srv, err := startServer(context.Background(), f, &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv.shutdown() })

	const head = "Host: 127.0.0.1\r\nAuthorization: Bearer t\r\n"
	for _, c := range []struct{ name, send string }{
		{"silent", ""},
		{"part of the headers", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"},
		{"part of the body", "POST /apps/a/users/u/sessions/s HTTP/1.1\r\n" + head + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"},
		{"idle after its answer", "GET /apps/a/users/u/sessions HTTP/1.1\r\n" + head + "\r\n"},
		{"no token, idle after its answer", "GET /apps/a/users/u/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dialServer(t, srv)
			_, err := io.WriteString(conn, c.send)
			require.NoError(t, err)
			// 5 s: far beyond the timeouts set here, below serve's defaults.
			closedByServer(t, conn, 5*time.Second, c.name)
		})
	}
}

// TestServeWriteTimeout: a client that does not read a large answer is cut
// by the write timeout: the server's write blocks once the socket buffers
// are full, and the server closes the connection on its own.
func TestServeWriteTimeout(t *testing.T) {
	t.Parallel()
	f := embeddedFlags(t.TempDir())
	f.http.writeTimeout = 3 * time.Second // long enough for the answer to start (-race)
	var out bytes.Buffer
	srv, err := startServer(context.Background(), f, &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv.shutdown() })
	ctx := context.Background()
	// 6 events of about 900 KB: an answer beyond the socket buffers (the
	// client's is made small; Linux's send buffer grows to 4 MiB).
	resp, err := srv.svc.Create(ctx, &service.CreateRequest{AppName: "a", UserID: "u", SessionID: "big"})
	require.NoError(t, err)
	text := strings.Repeat("x", 900<<10)
	for range 6 {
		require.NoError(t, srv.svc.AppendEvent(ctx, resp.Session, &service.Event{Author: "user",
			Content: json.RawMessage(`{"parts":[{"text":"` + text + `"}]}`)}))
	}
	conn := dialServer(t, srv)
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = io.WriteString(conn, "GET /apps/a/users/u/sessions/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	// The connection stays unread until the server has closed it on its
	// own (then what it sent before is read, and the end).
	deadline := time.Now().Add(time.Minute)
	for srv.ln.open.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "the connection was never accepted")
		time.Sleep(5 * time.Millisecond)
	}
	for srv.ln.open.Load() > 0 {
		require.True(t, time.Now().Before(deadline), "the server still writes to a client that does not read")
		time.Sleep(20 * time.Millisecond)
	}
	// The server has closed it. Its kernel may still hold what the server
	// wrote (up to 4 MiB) and send it through the 4 KiB window at the pace
	// of its zero-window probes, slower than a minute allows; but a socket
	// its process closed answers new data with a reset, and a connection
	// the server kept would take it silently.
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	n, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok {
		require.False(t, ne.Timeout(), "a client that does not read: the server kept the connection open (%d bytes read)", n)
	}
	t.Logf("the server closed the connection after %d bytes of an answer of about %d", n, 6*len(text))
	require.Less(t, n, int64(6*len(text)), "the answer was cut")
}

// TestServeConnectionCap: at most --max-connections connections are open at
// once. Clients without the token keep more connections than that open,
// silent or refused; an authenticated request still gets its answer, and so
// does /healthz.
func TestServeConnectionCap(t *testing.T) {
	t.Parallel()
	f := embeddedFlags(t.TempDir())
	f.authToken = "t"
	f.http.maxConnections = 4
	f.http.readHeaderTimeout, f.http.idleTimeout = 200*time.Millisecond, 200*time.Millisecond
	var out bytes.Buffer
	srv, err := startServer(context.Background(), f, &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv.shutdown() })

	for i := range 30 {
		conn := dialServer(t, srv)
		if i%3 == 0 { // refused for its token; the others stay silent
			_, err := io.WriteString(conn, "GET /apps/a/users/u/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			require.NoError(t, err)
		}
	}
	// The server's open connections are sampled while the requests wait
	// their turn: never more than the cap.
	answered := make(chan struct{})
	var most int64
	var codes [2]int
	var bodies [2][]byte
	var errs [2]error
	go func() {
		defer close(answered)
		codes[0], bodies[0], errs[0] = tryAuthedCall("GET", srv.url+"/apps/a/users/u/sessions", "t", "")
		codes[1], bodies[1], errs[1] = tryAuthedCall("GET", srv.url+"/healthz", "", "")
	}()
	for sampling := true; sampling; {
		select {
		case <-answered:
			sampling = false
		case <-time.After(time.Millisecond):
		}
		most = max(most, srv.ln.open.Load())
	}
	require.NoError(t, errors.Join(errs[:]...))
	require.Equal(t, http.StatusOK, codes[0], "authenticated request: %s", bodies[0])
	require.Equal(t, http.StatusOK, codes[1], "/healthz: %s", bodies[1])
	require.LessOrEqual(t, most, int64(4), "connections the server held at once")
}

// TestLimitListener: the listener accepts at most its cap of connections at
// a time; one more is accepted when one closes, and all are served in the
// end.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := newLimitListener(inner, 3)
	defer ln.Close()
	var inFlight, most, served atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			go func() {
				io.Copy(io.Discard, c) // until the client closes
				inFlight.Add(-1)
				served.Add(1)
				c.Close()
			}()
		}
	}()
	var clients []net.Conn
	for range 12 {
		c, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		clients = append(clients, c)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !ok() {
			require.True(t, time.Now().Before(deadline), what)
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("3 connections accepted", func() bool { return inFlight.Load() == 3 })
	for i, c := range clients {
		c.Close()
		waitFor(fmt.Sprintf("client %d served", i), func() bool { return served.Load() == int64(i+1) })
		if left := int64(len(clients) - i - 1); left >= 3 {
			waitFor("the next connection accepted", func() bool { return inFlight.Load() == 3 })
		}
	}
	require.Equal(t, int64(3), most.Load(), "connections open at once")
	// Close ends an Accept that waits for a slot.
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		defer c.Close()
	}
	waitFor("3 more accepted", func() bool { return inFlight.Load() == 3 })
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	require.NoError(t, ln.Close())
	require.ErrorIs(t, <-done, net.ErrClosed)
}

// TestServeSlowClientDoesNotStarveDrain: a client that sends its headers
// and `{` then nothing holds HTTP only for the grace; the drain that
// follows has its own budget and flushes every acknowledged append.
// Postgres holds the flush back (a lock on events) until the slow client's
// connection has been closed by the server, or shutdown returned.
func TestServeSlowClientDoesNotStarveDrain(t *testing.T) {
	t.Parallel()
	dbURL := testenv.FreshDatabase(t)
	f := embeddedFlags(t.TempDir())
	f.store.databaseURL, f.migrate = dbURL, true
	f.http.readTimeout, f.http.writeTimeout = 10*time.Minute, 10*time.Minute // the grace, not a timeout, must end it
	f.http.shutdownGrace, f.drainTimeout = 200*time.Millisecond, 30*time.Second
	var out bytes.Buffer
	srv, err := startServer(context.Background(), f, &out)
	require.NoError(t, err)
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()
	count := func(q string) int {
		var n int
		require.NoError(t, db.QueryRow(q).Scan(&n))
		return n
	}

	sess := srv.url + "/apps/a/users/u/sessions/s"
	code, body := call(t, "POST", sess, `{}`)
	require.Equal(t, http.StatusOK, code, "%s", body)
	deadline := time.Now().Add(time.Minute)
	for count(`SELECT count(*) FROM sessions`) == 0 {
		require.True(t, time.Now().Before(deadline), "the session never reached Postgres")
		time.Sleep(10 * time.Millisecond)
	}
	lock, err := db.Begin()
	require.NoError(t, err)
	var once sync.Once
	unlock := func() { once.Do(func() { lock.Rollback() }) }
	defer unlock()
	_, err = lock.Exec(`LOCK TABLE events IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	for i := range 5 {
		code, body := call(t, "POST", sess+"/events", fmt.Sprintf(`{"author":"user","content":{"parts":[{"text":"m%d"}]}}`, i))
		require.Equal(t, http.StatusOK, code, "%s", body)
	}

	slow := dialServer(t, srv)
	_, err = io.WriteString(slow, "POST /apps/a/users/u/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	// 100 Continue: the handler reads the body, the request is in flight.
	br := bufio.NewReader(slow)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "100 Continue")
	_, err = io.WriteString(slow, "{")
	require.NoError(t, err)

	shut := make(chan error, 1)
	go func() { shut <- srv.shutdown() }()
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		slow.SetReadDeadline(time.Now().Add(2 * time.Minute))
		io.Copy(io.Discard, br)
	}()
	var shutErr error
	returned := false
	select {
	case <-cut:
	case shutErr = <-shut:
		returned = true
	}
	unlock()
	if !returned {
		shutErr = <-shut
	}
	require.Equal(t, 5, count(`SELECT count(*) FROM events`), "acknowledged appends in Postgres after the drain (shutdown: %v)", shutErr)
	require.NoError(t, shutErr)
}
