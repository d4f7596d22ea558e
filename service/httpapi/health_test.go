package httpapi_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/lib/pq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// TestProbesAnswerGenericReasons: /readyz needs no token, so it names what
// failed with a fixed reason and never the driver's error (addresses,
// database and table names), which goes to the log. The dashboard's
// overview does the same.
func TestProbesAnswerGenericReasons(t *testing.T) {
	redisURL, dbURL := testenv.RedisURL(t), testenv.FreshDatabase(t)
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, service.Migrate(ctx, dbURL))
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL, DatabaseURL: dbURL, Namespace: testenv.UniqueName(t, "httpapi-"), DisableFlusher: true})
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close(context.Background()) })
	ropt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(ropt)
	t.Cleanup(func() { rdb.Close() })
	var log bytes.Buffer
	h := httpapi.New(svc, httpapi.Options{Redis: rdb, Ready: svc.Ready, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	get := func(h http.Handler, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, strings.TrimSpace(w.Body.String())
	}

	code, body := get(h, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"status":"ok","checks":{"redis":"ok","database":"ok"}}`, body)

	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`DROP TABLE adksession_schema_migrations`)
	require.NoError(t, err)
	code, body = get(h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"status":"unavailable","checks":{"redis":"ok","database":"schema not migrated"}}`, body)
	require.Contains(t, log.String(), "no adksession migrations applied")

	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")
	admin, err := sql.Open("postgres", testenv.DatabaseURL(t))
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Exec(`DROP DATABASE ` + pq.QuoteIdentifier(dbName) + ` WITH (FORCE)`)
	require.NoError(t, err)
	log.Reset()
	code, body = get(h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"status":"unavailable","checks":{"redis":"ok","database":"database unavailable"}}`, body)
	require.Contains(t, log.String(), "ping database", "the log has the details")

	// Redis down: its address stays in the log; the database is not checked.
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { down.Close() })
	mr.Close()
	log.Reset()
	h = httpapi.New(svc, httpapi.Options{
		Redis: down, Ready: svc.Ready, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		FlushStats: func(context.Context) (httpapi.FlushStats, error) {
			return httpapi.FlushStats{}, errors.New("dial tcp 10.9.8.7:5432: connect: connection refused")
		},
	})
	code, body = get(h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"status":"unavailable","checks":{"redis":"redis unavailable","database":"not checked"}}`, body)
	require.Contains(t, log.String(), addr)
	code, body = get(h, "/api/overview")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, addr)
	require.NotContains(t, body, "10.9.8.7")
	require.Contains(t, body, `"error":"redis unavailable (see the server log)"`)
	require.Contains(t, body, `"error":"flush stats unavailable (see the server log)"`)
	require.Contains(t, log.String(), "10.9.8.7")
	code, body = get(h, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ok"}`, body)
}
