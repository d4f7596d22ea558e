package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// fuzzRoutes are the routes FuzzRequest sends to: method, path after
// /apps/{app}/users/{user}/sessions, and whether the session is created
// first (so that the body reaches the service).
var fuzzRoutes = []struct {
	method, path string
	existing     bool
}{
	{"POST", "", false},
	{"POST", "/{id}", false},
	{"POST", "/{id}/events", true},
	{"POST", "/{id}/rewind", true},
	{"PATCH", "/{id}", true},
	{"GET", "/{id}", true},
	{"GET", "", false},
}

// FuzzRequest sends fuzzed requests through the whole handler to a service
// on a private real Redis: a route, the path parameters, the query and the
// JSON body (create session, append event, rewind, patch, get, list). The
// handler must never panic, must answer JSON, and must answer a 4xx, never
// a 5xx, to whatever the client sends; afterwards the session and the
// user's list still read without a 5xx. Redis is emptied before each
// input, so that a failure reproduces from its input alone.
func FuzzRequest(f *testing.F) {
	ctx := context.Background()
	server := testenv.StartRedis(f)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr})
	f.Cleanup(func() { rdb.Close() })
	svc, err := service.Open(ctx, service.Config{RedisURL: server.URL, Namespace: "fuzz", MaxEventBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close(ctx) })
	h := httpapi.New(svc, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	f.Fuzz(func(t *testing.T, route uint8, app, user, id, query string, body []byte) {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if rt.existing {
			// Errors are the fuzzed ids' (invalid ones).
			svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: id})
		}
		sessions := "/apps/" + url.PathEscape(app) + "/users/" + url.PathEscape(user) + "/sessions"
		send := func(method, path, query string, body []byte) {
			target, err := url.Parse(path)
			if err != nil {
				t.Fatalf("escaped path %q does not parse: %v", path, err)
			}
			target.RawQuery = query
			req := httptest.NewRequest(method, "/", bytes.NewReader(body))
			req.URL = target
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			checkAnswer(t, method+" "+path, w)
		}
		send(rt.method, sessions+strings.ReplaceAll(rt.path, "{id}", url.PathEscape(id)), query, body)
		send("GET", sessions+"/"+url.PathEscape(id), "", nil)
		send("GET", sessions, "", nil)
	})
}

// checkAnswer fails on a 5xx or an answer that is not JSON; an error answer
// must say what is wrong.
func checkAnswer(t *testing.T, route string, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s: %d %s", route, w.Code, w.Body)
	}
	if w.Code == http.StatusNoContent {
		return
	}
	var answer any
	if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil {
		t.Fatalf("%s: %d, answer is not JSON: %v: %q", route, w.Code, err, w.Body)
	}
	if w.Code >= 400 {
		if e, _ := answer.(map[string]any)["error"].(string); e == "" {
			t.Fatalf("%s: %d without an error message: %s", route, w.Code, w.Body)
		}
	}
}
