package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

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
	for _, want := range []string{"shop / alice / s1", "revision 2, flushed 0, pending 2", "app      ver", "user     lang", "session  color", `"teal"`, "hello", "world", "EVENTS (2)"} {
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
	require.Equal(t, flushStatus{Cached: true, Revision: 2, Flushed: 0, Pending: 2, FirstCached: 1, CachedEvents: 2}, in.Flush)

	require.ErrorIs(t, runInspect(ctx, []string{"--redis", url, "shop", "bob", "s1"}, &out, &errs), service.ErrNotFound)
}
