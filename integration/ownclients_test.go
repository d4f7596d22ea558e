package integration

// Bring your own clients (docs/persistence.md, "Your own handles"): Config.Redis and Config.DB take the
// go-redis client and the database handle a team already configured.

import (
	"context"
	"database/sql"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// countHook counts the commands a client processes, alone or pipelined.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

func TestOwnClients(t *testing.T) {
	t.Parallel()
	redisClients := map[string]func(t *testing.T) redis.UniversalClient{
		"standalone": func(t *testing.T) redis.UniversalClient {
			opt, err := redis.ParseURL(testenv.RedisURL(t))
			require.NoError(t, err)
			return redis.NewClient(opt)
		},
		"cluster": func(t *testing.T) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
		},
	}
	// A database/sql handle whose sessions are not in UTC, and a *sqlx.DB.
	dbHandles := map[string]func(t *testing.T, dbURL string) (*sql.DB, string){
		"sql.DB": func(t *testing.T, dbURL string) (*sql.DB, string) {
			u, err := url.Parse(dbURL)
			require.NoError(t, err)
			q := u.Query()
			q.Set("timezone", "Pacific/Auckland")
			u.RawQuery = q.Encode()
			db, err := sql.Open("postgres", u.String())
			require.NoError(t, err)
			return db, "postgres"
		},
		"sqlx.DB": func(t *testing.T, dbURL string) (*sql.DB, string) {
			x, err := sqlx.Connect("postgres", dbURL)
			require.NoError(t, err)
			return x.DB, x.DriverName()
		},
	}
	for rname, newRedis := range redisClients {
		for dname, newDB := range dbHandles {
			t.Run(rname+"/"+dname, func(t *testing.T) {
				t.Parallel()
				ownClients(t, newRedis(t), newDB)
			})
		}
	}
}

func ownClients(t *testing.T, rdb redis.UniversalClient, newDB func(t *testing.T, dbURL string) (*sql.DB, string)) {
	ctx := wbCtx(t)
	defer rdb.Close()
	hook := &countHook{}
	rdb.AddHook(hook)
	dbURL := testenv.FreshDatabase(t)
	db, dialect := newDB(t, dbURL)
	defer db.Close()
	require.NoError(t, service.MigrateDB(ctx, db, dialect))

	cfg := service.Config{Redis: rdb, DB: db, DBDialect: dialect, Namespace: testenv.UniqueName(t, "own-") + ":"}
	svc, err := service.Open(ctx, cfg)
	require.NoError(t, err)
	created, err := svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	ev := &service.Event{InvocationID: "i1", Author: "agent", Actions: service.EventActions{StateDelta: map[string]any{"k": "v"}}}
	require.NoError(t, svc.AppendEvent(ctx, created.Session, ev))
	require.NoError(t, svc.Flush(ctx))
	require.NoError(t, svc.Close(ctx))
	require.Positive(t, hook.n.Load(), "the commands went through the caller's client")

	// Both handles are still open, and the rows are there with the event's instant.
	require.NoError(t, rdb.Ping(ctx).Err())
	var us int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT (extract(epoch FROM "timestamp" AT TIME ZONE 'UTC') * 1000000)::bigint
FROM events WHERE id = $1`, ev.ID).Scan(&us))
	require.Equal(t, ev.Timestamp.UnixMicro(), us)

	// Another deployment on the same handles reads the session cold.
	cfg.Namespace = testenv.UniqueName(t, "own2-") + ":"
	svc2, err := service.Open(ctx, cfg)
	require.NoError(t, err)
	defer svc2.Close(ctx)
	got, err := svc2.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, 1, got.Session.Events().Len())
	require.Equal(t, ev.Timestamp, got.Session.Events().At(0).Timestamp)
	v, err := got.Session.State().Get("k")
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

func TestOwnClientsConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := wbCtx(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	db, err := sql.Open("postgres", "postgres://127.0.0.1:1/x")
	require.NoError(t, err)
	defer db.Close()
	for name, cfg := range map[string]service.Config{
		"both redis":       {RedisURL: "redis://127.0.0.1:1", Redis: rdb},
		"no redis":         {DB: db, DBDialect: "postgres"},
		"both databases":   {Redis: rdb, DatabaseURL: "postgres://x", DB: db, DBDialect: "postgres"},
		"handle, no kind":  {Redis: rdb, DB: db},
		"unknown database": {RedisURL: testenv.RedisURL(t), DB: db, DBDialect: "oracle"},
	} {
		_, err := service.Open(ctx, cfg)
		require.ErrorIs(t, err, service.ErrInvalidArgument, name)
	}
}
