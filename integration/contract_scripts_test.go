package integration

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// docs/design.md, "Redis": scripts are loaded with SCRIPT LOAD / EVALSHA and survive
// SCRIPT FLUSH. Private servers: flushing the scripts of the shared ones
// would change what other packages' tests exercise.

func TestContractScriptFlushStandalone(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	testScriptFlush(t, srv.URL)
}

func TestContractScriptFlushCluster(t *testing.T) {
	t.Parallel()
	c := testenv.StartCluster(t)
	testScriptFlush(t, c.URL)
}

func testScriptFlush(t *testing.T, url string) {
	e := newEnv(t, url, nil)
	ctx := ctxT(t)
	flush := func() {
		t.Helper()
		switch c := e.rdb.(type) {
		case *redis.ClusterClient:
			require.NoError(t, c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
				return n.ScriptFlush(ctx).Err()
			}))
		case *redis.Client:
			require.NoError(t, c.ScriptFlush(ctx).Err())
		}
	}
	flush()
	s := e.create("app", "u", "s", map[string]any{"a": 1, "app:x": 1})
	flush()
	e.append(s, &service.Event{Author: "a", InvocationID: "i", Actions: service.EventActions{
		StateDelta: map[string]any{"b": 2, "temp:t": 1, "app:y": 2}}})
	flush()
	got := e.get(&service.GetRequest{AppName: "app", UserID: "u", SessionID: "s", InvocationID: "i"})
	require.Equal(t, map[string]any{"a": float64(1), "b": float64(2), "temp:t": float64(1), "app:x": float64(1), "app:y": float64(2)}, stateOf(got))
	require.Equal(t, 1, got.Events().Len())
	flush()
	require.NoError(t, e.svc.EndInvocation(ctx, s, "i"))
	require.False(t, e.exists(e.keys.Session("app", "u", "s").Temp))
	flush()
	r, err := e.svc.List(ctx, &service.ListRequest{AppName: "app", UserID: "u"})
	require.NoError(t, err)
	require.Len(t, r.Sessions, 1)
	flush()
	require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: "app", UserID: "u", SessionID: "s"}))
	require.False(t, e.exists(e.keys.Session("app", "u", "s").Session))
}
