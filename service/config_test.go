package service

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
)

// Config() of a service opened with nothing but a Redis reports the values
// it runs with, each default filled in (Config.withDefaults is the one place
// they are applied), and the service runs with them: the temp hash of an
// invocation gets Config().TempTTL.
func TestConfigReportsDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mr := miniredis.RunT(t)
	svc, err := Open(ctx, Config{RedisURL: "redis://" + mr.Addr() + "/0"})
	require.NoError(t, err)
	defer svc.Close(ctx)
	got := svc.Config()
	want := Config{RedisURL: got.RedisURL, Redis: got.Redis, Shards: 64, TempTTL: time.Hour, CacheTTL: 24 * time.Hour,
		MaxCachedEvents: 1000, MaxEventBytes: 1 << 20, MaxStateValueBytes: 1 << 20, MaxDeltaKeys: 1000, MaxWriteBytes: 2 << 20,
		MaxAppStateBytes: 2 << 20, MaxUserStateBytes: 2 << 20, MaxSessionStateBytes: 4 << 20, FlushBatchSize: 500,
		FlushInterval: 16 * time.Second, FlushLeaseTTL: 15 * time.Second, WaitTimeout: time.Second, Logger: slog.Default(),
		Retention: RetentionConfig{Interval: time.Hour}}
	require.Equal(t, want, got)

	created, err := svc.Create(ctx, &CreateRequest{AppName: "a", UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, svc.AppendEvent(ctx, created.Session, &Event{InvocationID: "inv-1", Author: "agent",
		Actions: EventActions{StateDelta: map[string]any{TempPrefix + "step": 1}}}))
	var temp []string
	for _, k := range mr.Keys() {
		if ttl := mr.TTL(k); ttl > 0 {
			temp = append(temp, k)
			require.Equal(t, got.TempTTL, ttl, k)
		}
	}
	require.Len(t, temp, 1, "one key with a TTL: the invocation's temp hash")
}
