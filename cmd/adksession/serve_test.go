package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// embeddedFlags are serve's defaults with no flags and no environment,
// with the SQLite file in dir and a free HTTP port.
func embeddedFlags(dir string) serveFlags {
	f := serveFlags{addr: "127.0.0.1:0", embeddedRedis: "127.0.0.1:0", dbFile: filepath.Join(dir, "adksession.db"),
		maxEventBytes: 1 << 20}
	f.http.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	registerDrainTimeout(flag.NewFlagSet("defaults", flag.ContinueOnError), &f.drainTimeout, "")
	return f
}

func call(t *testing.T, method, url string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestServeEmbeddedDefault runs the embedded default (in-process Redis and
// a SQLite file), appends over HTTP, drains on shutdown, then serves the
// session again from a new, empty embedded Redis: it comes back from SQLite.
func TestServeEmbeddedDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out bytes.Buffer
	srv, err := startServer(context.Background(), embeddedFlags(dir), &out)
	require.NoError(t, err)
	printed := out.String()
	require.Contains(t, printed, "redis:    redis://127.0.0.1:")
	require.Contains(t, printed, "database: sqlite://"+filepath.Join(dir, "adksession.db"))
	require.Contains(t, printed, "http:     "+srv.url)

	sess := srv.url + "/apps/shop/users/alice/sessions/s1"
	code, body := call(t, "POST", sess, `{"color":"teal","user:lang":"fr"}`)
	require.Equal(t, http.StatusOK, code, "%s", body)
	for i := range 3 {
		code, body = call(t, "POST", sess+"/events", `{"author":"user","invocationId":"i1","content":{"parts":[{"text":"msg `+string(rune('a'+i))+`"}]},"actions":{"stateDelta":{"n":`+string(rune('0'+i))+`}}}`)
		require.Equal(t, http.StatusOK, code, "%s", body)
	}
	code, body = call(t, "GET", srv.url+"/readyz", "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Contains(t, string(body), `"database":"ok"`)
	code, body = call(t, "GET", srv.url+"/api/overview", "")
	require.Equal(t, http.StatusOK, code)
	var ov struct {
		CachedSessions *int64 `json:"cachedSessions"`
		Flush          *struct {
			Backlog int64 `json:"backlog"`
		} `json:"flush"`
	}
	require.NoError(t, json.Unmarshal(body, &ov))
	require.NotNil(t, ov.Flush, "the dashboard gets flush stats with a database")
	require.NotNil(t, ov.CachedSessions)
	require.Equal(t, int64(1), *ov.CachedSessions)
	code, body = call(t, "GET", srv.url+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "adksession_appends_total 3")
	require.Contains(t, string(body), "adksession_flush_backlog")

	require.NoError(t, srv.shutdown())

	// A new process: a new, empty embedded Redis, the same SQLite file.
	out.Reset()
	srv2, err := startServer(context.Background(), embeddedFlags(dir), &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv2.shutdown() })
	code, body = call(t, "GET", srv2.url+"/apps/shop/users/alice/sessions/s1", "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var got struct {
		State  map[string]any    `json:"state"`
		Events []json.RawMessage `json:"events"`
	}
	require.NoError(t, json.Unmarshal(body, &got))
	require.Len(t, got.Events, 3)
	require.Equal(t, map[string]any{"color": "teal", "user:lang": "fr", "n": float64(2)}, got.State)
	require.Contains(t, string(got.Events[2]), "msg c")
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 2, run(nil, &out, &out))
	require.Contains(t, out.String(), "adksession serve")
	for _, cmd := range []string{"serve", "flush", "migrate", "inspect", "bench"} {
		out.Reset()
		require.Equal(t, 0, run([]string{cmd, "--help"}, &out, &out), cmd)
		require.Contains(t, out.String(), "Usage: adksession "+cmd, cmd)
	}
	out.Reset()
	require.Equal(t, 0, run([]string{"serve", "--help"}, &out, &out))
	for _, want := range []string{"REDIS_URL", "DATABASE_URL", "ADDR", "AUTH_TOKEN", "-namespace", "second signal",
		"-read-timeout", "-write-timeout", "-idle-timeout", "-max-connections", "-http-shutdown-timeout", "-drain-timeout"} {
		require.Contains(t, out.String(), want)
	}
	out.Reset()
	require.Equal(t, 2, run([]string{"frobnicate"}, &out, &out))
	require.Contains(t, out.String(), `unknown command "frobnicate"`)
	out.Reset()
	require.Equal(t, 2, run([]string{"inspect", "only-one-arg"}, &out, &out))
	out.Reset()
	require.Equal(t, 2, run([]string{"serve", "--no-such-flag"}, &out, &out))
}

// TestServeRefusesPublicWithoutToken: beyond loopback, serve needs a token
// or --no-auth, says so, and opens nothing before refusing; the embedded
// Redis (no password) needs --no-auth. Loopback and the allowed variants
// start.
func TestServeRefusesPublicWithoutToken(t *testing.T) {
	t.Parallel()
	refused := []struct {
		name string
		set  func(f *serveFlags)
		want string
	}{
		{"all interfaces", func(f *serveFlags) { f.addr = "0.0.0.0:0" }, "--auth-token"},
		{"all interfaces, no host", func(f *serveFlags) { f.addr = ":0" }, "--no-auth"},
		{"all interfaces, IPv6", func(f *serveFlags) { f.addr = "[::]:0" }, "without a token"},
		{"embedded Redis on all interfaces, with a token", func(f *serveFlags) { f.authToken, f.embeddedRedis = "t", "0.0.0.0:0" }, "embedded Redis"},
		{"bad allowed origin", func(f *serveFlags) { f.allowOrigins = listFlag{"*"} }, "allowed origin"},
	}
	for _, c := range refused {
		dir := t.TempDir()
		f := embeddedFlags(dir)
		c.set(&f)
		var out bytes.Buffer
		_, err := startServer(context.Background(), f, &out)
		require.ErrorContains(t, err, c.want, c.name)
		require.NoFileExists(t, f.dbFile, "%s: the database was opened before refusing", c.name)
		require.Empty(t, out.String(), c.name)
	}

	started := []struct {
		name string
		set  func(f *serveFlags)
	}{
		{"all interfaces with a token", func(f *serveFlags) { f.addr, f.authToken = "0.0.0.0:0", "t" }},
		{"all interfaces with --no-auth", func(f *serveFlags) { f.addr, f.noAuth = "0.0.0.0:0", true }},
		{"localhost", func(f *serveFlags) { f.addr = "localhost:0" }},
		{"embedded Redis on all interfaces with --no-auth", func(f *serveFlags) { f.embeddedRedis, f.noAuth = "0.0.0.0:0", true }},
	}
	for _, c := range started {
		f := embeddedFlags(t.TempDir())
		c.set(&f)
		var out bytes.Buffer
		srv, err := startServer(context.Background(), f, &out)
		require.NoError(t, err, c.name)
		code, body := call(t, "GET", srv.url+"/readyz", "")
		require.Equal(t, http.StatusOK, code, "%s: %s", c.name, body)
		require.NoError(t, srv.shutdown(), c.name)
	}
}

// TestServeGuards: the flags reach the handler: a foreign Origin is 403, an
// --allow-origin one passes, and so does a Host named by --allow-host.
func TestServeGuards(t *testing.T) {
	t.Parallel()
	f := embeddedFlags(t.TempDir())
	require.NoError(t, f.allowOrigins.Set("https://app.example, https://b.example"))
	require.NoError(t, f.allowHosts.Set("sessions.internal"))
	var out bytes.Buffer
	srv, err := startServer(context.Background(), f, &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv.shutdown() })
	post := func(id, origin, host string) int {
		req, err := http.NewRequest("POST", srv.url+"/apps/a/users/u/sessions/"+id, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post("s1", "https://evil.example", ""))
	require.Equal(t, http.StatusOK, post("s2", "https://b.example", ""))
	require.Equal(t, http.StatusForbidden, post("s3", "https://b.example", "evil.example"))
	require.Equal(t, http.StatusOK, post("s4", "https://b.example", "sessions.internal:8080"))
	for id, want := range map[string]int{"s1": http.StatusNotFound, "s2": http.StatusOK, "s3": http.StatusNotFound, "s4": http.StatusOK} {
		code, body := call(t, "GET", srv.url+"/apps/a/users/u/sessions/"+id, "")
		require.Equal(t, want, code, "%s: %s", id, body)
	}
}

// TestServeStartFailsClean: every step of serve's start-up that can fail
// (the HTTP address taken, the embedded Redis's address taken, a database
// that cannot be opened, a Redis that does not answer) returns an error
// naming what failed, panics nowhere, and closes what the steps before it
// opened: the HTTP and embedded Redis ports can be listened on again, and a
// start refused at the HTTP address created no database file.
func TestServeStartFailsClean(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	// freeAddr is a loopback address nothing listens on.
	freeAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		return ln.Addr().String()
	}
	for _, c := range []struct {
		name string
		args func(dir, httpAddr, redisAddr string) []string
		want string
	}{
		{"HTTP address in use", func(dir, _, redisAddr string) []string {
			return []string{"--addr", taken.Addr().String(), "--embedded-redis", redisAddr, "--db-file", filepath.Join(dir, "x.db")}
		}, "--addr " + taken.Addr().String()},
		{"embedded Redis address in use", func(dir, httpAddr, _ string) []string {
			return []string{"--addr", httpAddr, "--embedded-redis", taken.Addr().String(), "--db-file", filepath.Join(dir, "x.db")}
		}, "embedded redis on " + taken.Addr().String()},
		{"database cannot be opened", func(dir, httpAddr, redisAddr string) []string {
			return []string{"--addr", httpAddr, "--embedded-redis", redisAddr, "--db-file", filepath.Join(dir, "no-such-dir", "x.db")}
		}, "migrate sqlite://"},
		{"Redis does not answer", func(dir, httpAddr, _ string) []string {
			return []string{"--addr", httpAddr, "--redis", "redis://" + freeAddr() + "/0"}
		}, "connection refused"},
	} {
		dir := t.TempDir()
		httpAddr, redisAddr := freeAddr(), freeAddr()
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		err := runServe(ctx, c.args(dir, httpAddr, redisAddr), &out, &errOut)
		cancel()
		require.ErrorContains(t, err, c.want, c.name)
		for _, addr := range []string{httpAddr, redisAddr} {
			ln, err := net.Listen("tcp", addr)
			require.NoError(t, err, "%s: %s still taken after the failed start", c.name, addr)
			ln.Close()
		}
		if c.name == "HTTP address in use" {
			require.NoFileExists(t, filepath.Join(dir, "x.db"), "the database was opened before the address was tried")
			require.Empty(t, out.String(), "nothing was started")
		}
	}
}

// TestDrainTimeoutFlags: --drain-timeout and its old name --shutdown-timeout
// set the same budget, and a zero budget is refused.
func TestDrainTimeoutFlags(t *testing.T) {
	for args, want := range map[string]time.Duration{"": 30 * time.Second, "--drain-timeout=7s": 7 * time.Second, "--shutdown-timeout=5s": 5 * time.Second} {
		var d time.Duration
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		registerDrainTimeout(fs, &d, "")
		require.NoError(t, fs.Parse(strings.Fields(args)))
		require.Equal(t, want, d, args)
	}
	require.ErrorContains(t, checkDrainTimeout(0), "--drain-timeout must be positive")
}

// TestServeStateCaps: the --max-*-state-bytes flags set the caps of the
// state totals, and the embedded Redis runs their checks: a create or an
// append that would pass one is a 400 naming the scope and the Config
// field, and leaves the state as it was.
func TestServeStateCaps(t *testing.T) {
	t.Parallel()
	f := embeddedFlags(t.TempDir())
	f.stateCaps = [3]int{100, 100, 100}
	srv, err := startServer(context.Background(), f, io.Discard)
	require.NoError(t, err)
	t.Cleanup(func() { srv.shutdown() })
	big := strings.Repeat("x", 100)
	sess := srv.url + "/apps/shop/users/alice/sessions/s1"
	code, body := call(t, "POST", sess, `{"color":"`+big+`"}`)
	require.Equal(t, http.StatusBadRequest, code, "%s", body)
	require.Contains(t, string(body), "state of session s1 of app shop, user alice")
	require.Contains(t, string(body), "limit 100 (Config.MaxSessionStateBytes)")
	code, body = call(t, "POST", sess, `{"color":"teal"}`)
	require.Equal(t, http.StatusOK, code, "%s", body)
	for _, c := range []struct{ key, scope, field string }{
		{"n", "session s1 of app shop, user alice", "MaxSessionStateBytes"},
		{"user:n", "user alice of app shop", "MaxUserStateBytes"},
		{"app:n", "app shop", "MaxAppStateBytes"},
	} {
		code, body = call(t, "POST", sess+"/events", `{"author":"user","invocationId":"i1","actions":{"stateDelta":{"`+c.key+`":"`+big+`"}}}`)
		require.Equal(t, http.StatusBadRequest, code, "%s", body)
		require.Contains(t, string(body), "state of "+c.scope, c.key)
		require.Contains(t, string(body), "(Config."+c.field+")", c.key)
		code, body = call(t, "POST", sess+"/events", `{"author":"user","invocationId":"i1","actions":{"stateDelta":{"`+c.key+`":1}}}`)
		require.Equal(t, http.StatusOK, code, "%s", body)
	}
	code, body = call(t, "GET", sess, "")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var got struct {
		State map[string]any `json:"state"`
	}
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, map[string]any{"color": "teal", "n": float64(1), "user:n": float64(1), "app:n": float64(1)}, got.State)
}
