package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestInspect: the state by scope (temp with --invocation), the events of
// the window, sizes and key counts, as tables and as JSON, on the embedded
// Redis without a database (so Redis is the only copy).
func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "redis://" + miniredis.RunT(t).Addr() + "/0"
	svc, err := service.Open(ctx, service.Config{RedisURL: url})
	require.NoError(t, err)
	defer svc.Close(ctx)
	resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "shop", UserID: "alice", SessionID: "s1",
		State: map[string]any{"color": "teal", "user:lang": "fr", "app:ver": 3}})
	require.NoError(t, err)
	for i, text := range []string{"hello", "world"} {
		require.NoError(t, svc.AppendEvent(ctx, resp.Session, &service.Event{Author: "user", InvocationID: "i1",
			Content: []byte(`{"role":"user","parts":[{"text":"` + text + `"}]}`),
			Actions: service.EventActions{StateDelta: map[string]any{"n": i, "temp:scratch": "x"}}}))
	}

	var out, errs bytes.Buffer
	require.NoError(t, runInspect(ctx, []string{"--redis", url, "shop", "alice", "s1"}, &out, &errs))
	table := out.String()
	for _, want := range []string{"shop / alice / s1", "cached        yes", "revision 2; no database: Redis is the only copy",
		"events        2 in Redis (from seq 1) of 2", "redis memory", "session ", "STATE (app 1, user 1, session 2, temp 0 keys)",
		"app      ver", "user     lang", "session  color", `"teal"`, "hello", "world", "EVENTS (2)"} {
		require.Contains(t, table, want)
	}
	require.NotContains(t, table, "scratch", "temp state only with --invocation")

	out.Reset()
	require.NoError(t, runInspect(ctx, []string{"--redis", url, "--json", "--num-recent", "1", "--invocation", "i1", "shop", "alice", "s1"}, &out, &errs))
	var in inspection
	require.NoError(t, json.Unmarshal(out.Bytes(), &in))
	require.Len(t, in.Events, 1)
	require.Equal(t, "i1", in.Events[0].InvocationID)
	require.Equal(t, map[string]any{"ver": float64(3)}, in.State["app"])
	require.Equal(t, map[string]any{"lang": "fr"}, in.State["user"])
	require.Equal(t, map[string]any{"color": "teal", "n": float64(1)}, in.State["session"])
	require.Equal(t, map[string]any{"temp:scratch": "x"}, in.State["temp"])
	require.Equal(t, map[string]int{"app": 1, "user": 1, "session": 2, "temp": 1}, in.StateKeys)
	keys, err := cache.NewKeys("", 0)
	require.NoError(t, err)
	require.Equal(t, flushStatus{Cached: true, Database: false, Revision: 2, Shard: keys.Shard("shop", "alice")}, in.Flush)
	require.Equal(t, [3]int64{2, 1, 2}, [3]int64{in.Sizes.CachedEvents, in.Sizes.FirstCached, in.Sizes.TotalEvents})
	for _, k := range []string{"session", "events", "user", "app"} {
		require.Greater(t, in.Sizes.RedisBytes[k], int64(0), "MEMORY USAGE of the %s key", k)
	}

	require.ErrorIs(t, runInspect(ctx, []string{"--redis", url, "shop", "bob", "s1"}, &out, &errs), service.ErrNotFound)
}

// TestInspectWriteBehind, on real Redis and Postgres: the flush status of a
// session whose events are not flushed (pending, its shard's backlog and
// lag), then flushed, then gone from Redis (read from the database); the
// memory of its keys as Redis reports it.
func TestInspectWriteBehind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redisURL, dbURL := testenv.RedisURL(t), testenv.FreshDatabase(t)
	ns := testenv.UniqueName(t, "cmd-inspect-") + ":"
	require.NoError(t, service.Migrate(ctx, dbURL))
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL, DatabaseURL: dbURL, Namespace: ns, DisableFlusher: true})
	require.NoError(t, err)
	defer svc.Close(ctx)
	resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "shop", UserID: "alice", SessionID: "s1", State: map[string]any{"user:lang": "fr"}})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, svc.AppendEvent(ctx, resp.Session, &service.Event{Author: "user", InvocationID: "i1",
			Content: []byte(`{"parts":[{"text":"some words"}]}`), Actions: service.EventActions{StateDelta: map[string]any{"k": "v"}}}))
	}
	args := []string{"--redis", redisURL, "--database", dbURL, "--namespace", ns, "--json", "shop", "alice", "s1"}
	inspect := func() inspection {
		t.Helper()
		var out, errs bytes.Buffer
		require.NoError(t, runInspect(ctx, args, &out, &errs))
		var in inspection
		require.NoError(t, json.Unmarshal(out.Bytes(), &in), out.String())
		return in
	}
	in := inspect()
	require.Equal(t, [6]any{true, true, int64(3), int64(0), int64(3), int64(4)},
		[6]any{in.Flush.Cached, in.Flush.Database, in.Flush.Revision, in.Flush.Flushed, in.Flush.Pending, in.Flush.ShardBacklog},
		"cached, database, revision, flushed, pending, shard backlog (the create and three appends)")
	require.Greater(t, in.Flush.ShardLagSeconds, 0.0)
	for _, k := range []string{"session", "events", "event ids", "user", "user index"} {
		require.Greater(t, in.Sizes.RedisBytes[k], int64(0), "MEMORY USAGE of the %s key", k)
	}
	var sum int64
	for _, n := range in.Sizes.RedisBytes {
		sum += n
	}
	require.Equal(t, sum, in.Sizes.RedisTotalBytes)

	f := svc.NewFlusher(nil)
	_, err = f.RunOnce(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Stop(ctx))
	in = inspect()
	require.Equal(t, [4]int64{3, 3, 0, 0}, [4]int64{in.Flush.Revision, in.Flush.Flushed, in.Flush.Pending, in.Flush.ShardBacklog},
		"revision, flushed, pending, backlog after a flush")
	require.Zero(t, in.Flush.ShardLagSeconds)

	keys, err := cache.NewKeys(ns, 0)
	require.NoError(t, err)
	k := keys.Session("shop", "alice", "s1")
	rdb, err := cache.NewClient(redisURL)
	require.NoError(t, err)
	defer rdb.Close()
	require.NoError(t, rdb.Del(ctx, append(k.Owned(), k.Session)...).Err())
	in = inspect()
	require.False(t, in.Flush.Cached, "evicted")
	require.Equal(t, [3]int64{3, 3, 3}, [3]int64{in.Flush.Revision, in.Flush.Flushed, in.Sizes.TotalEvents})
	require.Len(t, in.Events, 3)
}
