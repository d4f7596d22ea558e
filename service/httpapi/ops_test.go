package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// opsServer is a server over real Redis and a fresh Postgres database, its
// flusher off, wired as `adksession serve` wires the dashboard: so that a
// test can put changes into dead letters and watch a retried one flushed.
type opsServer struct {
	*apiServer
	rdb   redis.UniversalClient
	store *cache.Store
	keys  cache.Keys
}

func newOpsServer(t *testing.T, opt httpapi.Options) *opsServer {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(ctx, dbURL))
	ns := testenv.UniqueName(t, "ops-") + ":"
	svc, err := service.Open(ctx, service.Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL, Namespace: ns, DisableFlusher: true})
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close(context.Background()) })
	rdb, err := cache.NewClient(testenv.RedisURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	opt.Redis = rdb
	opt.FlushStats = func(ctx context.Context) (httpapi.FlushStats, error) {
		b, err := svc.Backlog(ctx)
		return httpapi.FlushStats{Lag: b.Lag, Backlog: b.Entries, DeadLetters: b.Dead}, err
	}
	h := httpapi.New(svc, opt)
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	keys, err := cache.NewKeys(ns, 0)
	require.NoError(t, err)
	return &opsServer{apiServer: &apiServer{Server: srv, svc: svc, token: opt.AuthToken}, rdb: rdb, keys: keys,
		store: cache.NewStore(rdb, cache.Options{Keys: keys, Durable: true})}
}

// deadLetterCreate creates a session and moves its create from the change
// log into the shard's dead letters, as the flusher does with a change the
// database refuses. It returns the shard.
func (s *opsServer) deadLetterCreate(t *testing.T, app, user, sid string) int {
	t.Helper()
	ctx := context.Background()
	_, err := s.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: map[string]any{"k": sid}})
	require.NoError(t, err)
	shard := s.keys.Shard(app, user)
	changes, _, err := s.store.ReadChanges(ctx, shard, 100)
	require.NoError(t, err)
	for _, c := range changes {
		if c.ID == sid {
			require.NoError(t, s.store.Ack(ctx, shard, []string{c.EntryID}, []cache.DeadLetter{{Change: c, Unit: cache.DeadSession, Reason: "refused by the test: " + sid}}))
			return shard
		}
	}
	t.Fatalf("no create of %s in the change log", sid)
	return 0
}

// logHas reports whether the shard's change log holds an entry of sid.
func (s *opsServer) logHas(t *testing.T, shard int, sid string) bool {
	t.Helper()
	msgs, err := s.rdb.XRange(context.Background(), s.keys.ShardKeys(shard).Log, "-", "+").Result()
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Values["i"] == sid {
			return true
		}
	}
	return false
}

type deadLettersJSON struct {
	Total  int64 `json:"total"`
	Shards []struct {
		Shard   int   `json:"shard"`
		Count   int64 `json:"count"`
		Letters []struct {
			Shard     int    `json:"shard"`
			Entry     string `json:"entry"`
			ID        string `json:"id"`
			Kind      string `json:"kind"`
			Unit      string `json:"unit"`
			AppName   string `json:"appName"`
			UserID    string `json:"userId"`
			SessionID string `json:"sessionId"`
			Reason    string `json:"reason"`
			Time      float64
		} `json:"letters"`
	} `json:"shards"`
}

// TestDeadLetterRoutes: GET /api/deadletters lists them per shard with
// their session, kind, reason and time; retry puts the change back on the
// change log (and the flusher writes it), drop forgets one; a second
// action on the same dead letter is 404; both need the token, a JSON body
// and the server's own origin.
func TestDeadLetterRoutes(t *testing.T) {
	t.Parallel()
	s := newOpsServer(t, httpapi.Options{AuthToken: "tok"})
	ctx := context.Background()
	shardA := s.deadLetterCreate(t, "shop", "alice", "a1")
	shardB := s.deadLetterCreate(t, "shop", "bob", "b1")

	var list deadLettersJSON
	r := s.do(t, "GET", "/api/deadletters", nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.body)
	r.json(t, &list)
	require.Equal(t, int64(2), list.Total)
	entries := map[string]string{}
	for _, sh := range list.Shards {
		require.Equal(t, int64(len(sh.Letters)), sh.Count)
		for _, d := range sh.Letters {
			require.Equal(t, [4]string{"create", "session", "shop", "refused by the test: " + d.SessionID}, [4]string{d.Kind, d.Unit, d.AppName, d.Reason})
			require.Equal(t, sh.Shard, d.Shard)
			require.InDelta(t, float64(time.Now().Unix()), d.Time, 60)
			entries[d.SessionID] = d.Entry
		}
	}
	require.Len(t, entries, 2)

	retry := map[string]any{"shard": shardA, "entry": entries["a1"]}
	for _, tc := range []struct {
		name   string
		header []string
		body   any
		code   int
	}{
		{"no token", []string{"Authorization", ""}, retry, http.StatusUnauthorized},
		{"another origin", []string{"Origin", "https://evil.example"}, retry, http.StatusForbidden},
		{"not JSON", []string{"Content-Type", "text/plain"}, retry, http.StatusUnsupportedMediaType},
		{"no shard", nil, map[string]any{"entry": entries["a1"]}, http.StatusBadRequest},
		{"no entry", nil, map[string]any{"shard": shardA}, http.StatusBadRequest},
		{"wrong shard", nil, map[string]any{"shard": (shardA + 1) % 64, "entry": entries["a1"]}, http.StatusNotFound},
		{"not a dead letter", nil, map[string]any{"shard": shardA, "entry": `{"id":"1-1","fields":{"k":"c"}}`}, http.StatusNotFound},
	} {
		r := s.do(t, "POST", "/api/deadletters/retry", tc.body, tc.header...)
		require.Equal(t, tc.code, r.code, "%s: %s", tc.name, r.body)
	}
	require.False(t, s.logHas(t, shardA, "a1"), "a refused request changed the change log")

	r = s.do(t, "POST", "/api/deadletters/retry", retry)
	require.Equal(t, http.StatusOK, r.code, "%s", r.body)
	require.True(t, s.logHas(t, shardA, "a1"), "the retried change is not back on the change log")
	r = s.do(t, "POST", "/api/deadletters/retry", retry)
	require.Equal(t, http.StatusNotFound, r.code, "a second retry: %s", r.body)
	f := s.svc.NewFlusher(nil)
	_, err := f.RunOnce(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Stop(ctx))
	_, err = s.svc.Get(ctx, &service.GetRequest{AppName: "shop", UserID: "alice", SessionID: "a1"})
	require.NoError(t, err)
	resp, err := s.svc.List(ctx, &service.ListRequest{AppName: "shop", UserID: "alice"})
	require.NoError(t, err)
	require.Len(t, resp.Sessions, 1)

	drop := map[string]any{"shard": shardB, "entry": entries["b1"]}
	r = s.do(t, "POST", "/api/deadletters/drop", drop)
	require.Equal(t, http.StatusOK, r.code, "%s", r.body)
	r = s.do(t, "POST", "/api/deadletters/drop", drop)
	require.Equal(t, http.StatusNotFound, r.code, "a second drop: %s", r.body)
	require.False(t, s.logHas(t, shardB, "b1"), "a dropped dead letter went back to the change log")
	n, err := s.rdb.LLen(ctx, s.keys.ShardKeys(shardB).Dead).Result()
	require.NoError(t, err)
	require.Zero(t, n)

	r = s.do(t, "GET", "/api/deadletters", nil)
	r.json(t, &list)
	require.Zero(t, list.Total)
	r = s.do(t, "GET", "/api/deadletters?limit=0", nil)
	require.Equal(t, http.StatusOK, r.code)
	r = s.do(t, "GET", "/api/deadletters?limit=100000", nil)
	require.Equal(t, http.StatusBadRequest, r.code, "%s", r.body)
	var errBody map[string]string
	require.NoError(t, json.Unmarshal(r.body, &errBody))
	require.Contains(t, errBody["error"], "limit")
}
