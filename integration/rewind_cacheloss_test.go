package integration

// Rewind after a cache loss (docs/rewind.md): the create-time session
// state survives in the database, so a rewind before the first invocation
// restores it whether Redis still holds the session's undo records or the
// deltas are recomputed from the database after Redis lost the session.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestRewindAfterCacheLoss(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		lose func(e *wbEnv, srv *testenv.RedisServer)
	}{
		{"undo records", func(*wbEnv, *testenv.RedisServer) {}},
		{"FLUSHALL", func(e *wbEnv, srv *testenv.RedisServer) {
			require.NoError(t, e.rdb.FlushAll(context.Background()).Err())
		}},
		{"session keys deleted", func(e *wbEnv, _ *testenv.RedisServer) {
			k := e.sessionKeys("app", "u", "s")
			require.NoError(t, e.rdb.Del(context.Background(), k.Session, k.Events, k.Undo, k.Temp).Err())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			e := newWB(t, srv.URL, testenv.FreshDatabase(t), nil)
			ctx := wbCtx(t)
			s := e.create(e.svc, "app", "u", "s", map[string]any{"c": 4})
			e.mustAppend(e.svc, s, "inv1", "one", map[string]any{"c": 5, "x": 1})
			e.mustAppend(e.svc, s, "inv1", "two", map[string]any{"y": 2})
			e.mustAppend(e.svc, s, "inv2", "three", map[string]any{"c": 6})
			e.flush(e.svc)
			c.lose(e, srv)

			ev, err := e.svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "inv1"})
			require.NoError(t, err)
			require.Equal(t, map[string]any{"c": 4.0, "x": nil, "y": nil}, ev.Actions.StateDelta)
			got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
			require.NoError(t, err)
			require.Equal(t, map[string]any{"c": 4.0, "x": nil, "y": nil}, stateMap(got.Session))

			// The rewind event reaches the database like any other.
			e.flush(e.svc)
			c.lose(e, srv)
			got, err = e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
			require.NoError(t, err)
			require.Equal(t, map[string]any{"c": 4.0, "x": nil, "y": nil}, stateMap(got.Session))
		})
	}
}
