package service

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base/startstop"
	"github.com/adksession/adksession/integration/testenv"
)

// TestRetentionInBackground, on real Redis and Postgres: a service with
// Config.Retention prunes at once (its first attempt) and the idle session
// is gone; a second process of the fleet, opened while the lease is held,
// does not prune (one process per Interval); Close stops the loop.
func TestRetentionInBackground(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, Migrate(ctx, dbURL))
	cfg := Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL, Namespace: testenv.UniqueName(t, "retention-") + ":",
		FlushInterval: 10 * time.Millisecond}
	seed, err := Open(ctx, cfg)
	require.NoError(t, err)
	old := time.Now().Add(-40 * 24 * time.Hour)
	for _, sid := range []string{"idle", "fresh"} {
		resp, err := seed.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: sid})
		require.NoError(t, err)
		ev := &Event{Author: "user", InvocationID: "i", Content: json.RawMessage(`{"parts":[{"text":"hi"}]}`)}
		if sid == "idle" {
			ev.Timestamp = old
		}
		require.NoError(t, seed.AppendEvent(ctx, resp.Session, ev))
	}
	require.NoError(t, seed.Close(ctx))

	open := func() (*Service, *startstop.Signal[retentionAttempt]) {
		heard := new(startstop.Signal[retentionAttempt])
		heard.Init(10)
		c := cfg
		c.Retention = RetentionConfig{IdleFor: 30 * 24 * time.Hour, Interval: time.Hour, attempts: heard}
		svc, err := Open(ctx, c)
		require.NoError(t, err)
		return svc, heard
	}
	next := func(heard *startstop.Signal[retentionAttempt]) retentionAttempt {
		t.Helper()
		a, ok := heard.Wait(ctx)
		if !ok {
			t.Fatal("no attempt of the background prune")
		}
		return a
	}
	a, heardA := open()
	first := next(heardA)
	require.NoError(t, first.err)
	require.True(t, first.pruned, "the first process found the lease free")
	require.Equal(t, int64(1), first.sum.Sessions)
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()
	var ids []string
	rows, err := db.Query(`SELECT id FROM sessions`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.Equal(t, []string{"fresh"}, ids)

	b, heardB := open()
	second := next(heardB)
	require.NoError(t, second.err)
	require.False(t, second.pruned, "a second process pruned within the interval")
	require.NoError(t, b.Close(ctx))
	require.NoError(t, a.Close(ctx))
}

func TestRetentionConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RedisURL: "redis://x", Retention: RetentionConfig{IdleFor: time.Hour}}, "needs a database"},
		{Config{RedisURL: "redis://x", DatabaseURL: "sqlite:///x", Retention: RetentionConfig{IdleFor: -time.Hour}}, "Config.Retention.IdleFor"},
		{Config{RedisURL: "redis://x", DatabaseURL: "sqlite:///x", Retention: RetentionConfig{IdleFor: time.Hour, Interval: -1}}, "Config.Retention.Interval"},
		{Config{RedisURL: "redis://x", DatabaseURL: "sqlite:///x", Retention: RetentionConfig{IdleFor: time.Hour, BatchSize: -1}}, "PruneRequest.BatchSize"},
	} {
		_, err := tc.cfg.withDefaults()
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Contains(t, err.Error(), tc.want)
	}
	cfg, err := Config{RedisURL: "redis://x", DatabaseURL: "sqlite:///x", Retention: RetentionConfig{IdleFor: time.Hour}}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, time.Hour, cfg.Retention.Interval)
}
