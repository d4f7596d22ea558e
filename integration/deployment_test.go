package integration

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// deployment is one test's Service over a Redis namespace of its own (and,
// with Config.DatabaseURL, a migrated database), with a raw Redis client,
// the key layout and a raw SQL connection to look at what is literally
// stored. The tests' environments (env, rwEnv, wbEnv) build on it.
type deployment struct {
	t    testing.TB
	cfg  service.Config
	svc  *service.Service
	rdb  redis.UniversalClient
	keys cache.Keys
	db   *sql.DB // nil without a database
}

// newDeployment opens a Service with cfg, its Namespace a new name starting
// with prefix, after tweak (nil: none) changed it.
func newDeployment(t testing.TB, prefix string, cfg service.Config, tweak func(*service.Config)) *deployment {
	t.Helper()
	d := &deployment{t: t, cfg: cfg}
	d.cfg.Namespace = testenv.UniqueName(t, prefix) + ":"
	if tweak != nil {
		tweak(&d.cfg)
	}
	if d.cfg.DatabaseURL != "" {
		require.NoError(t, service.Migrate(wbCtx(t), d.cfg.DatabaseURL))
	}
	d.svc = d.open(d.cfg)
	var err error
	d.rdb, err = cache.NewClient(d.cfg.RedisURL)
	require.NoError(t, err)
	t.Cleanup(func() { d.rdb.Close() })
	d.keys, err = cache.NewKeys(d.cfg.Namespace, d.cfg.Shards)
	require.NoError(t, err)
	if d.cfg.DatabaseURL != "" {
		d.db, err = sql.Open("postgres", d.cfg.DatabaseURL)
		require.NoError(t, err)
		t.Cleanup(func() { d.db.Close() })
	}
	return d
}

// open opens another Service (another process of the fleet) with cfg,
// closed (drained for up to 30 s) when the test ends.
func (d *deployment) open(cfg service.Config) *service.Service {
	d.t.Helper()
	svc, err := service.Open(wbCtx(d.t), cfg)
	require.NoError(d.t, err)
	d.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		svc.Close(ctx)
	})
	return svc
}

// TestSharedDatabaseWarns: a second namespace opening a database another
// namespace opened within a day is warned about (one database is meant for
// one namespace, docs/operations.md); the first deployment's own reopening
// is not.
func TestSharedDatabaseWarns(t *testing.T) {
	t.Parallel()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(wbCtx(t), dbURL))
	open := func(ns string) string {
		var logs bytes.Buffer
		d := &deployment{t: t}
		d.open(service.Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL, Namespace: ns, DisableFlusher: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		return logs.String()
	}
	first, second := testenv.UniqueName(t, "ns-a")+":", testenv.UniqueName(t, "ns-b")+":"
	require.NotContains(t, open(first), "other namespaces")
	require.NotContains(t, open(first), "other namespaces", "the same namespace again")
	warned := open(second)
	require.Contains(t, warned, "the database also serves other namespaces")
	require.Contains(t, warned, first)
}
