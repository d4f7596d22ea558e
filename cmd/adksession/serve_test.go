package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
	return serveFlags{addr: "127.0.0.1:0", embeddedRedis: "127.0.0.1:0", dbFile: filepath.Join(dir, "adksession.db"),
		maxEventBytes: 1 << 20, shutdownTimeout: 30 * time.Second}
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

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, srv.shutdown(ctx))

	// A new process: a new, empty embedded Redis, the same SQLite file.
	out.Reset()
	srv2, err := startServer(context.Background(), embeddedFlags(dir), &out)
	require.NoError(t, err)
	t.Cleanup(func() { srv2.shutdown(context.Background()) })
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
	for _, want := range []string{"REDIS_URL", "DATABASE_URL", "ADDR", "AUTH_TOKEN", "-namespace", "second signal"} {
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
