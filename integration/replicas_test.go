package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestWaitReplicas: with Config.WaitReplicas a write is acknowledged only
// once a replica has it; without enough replicas it is an error.
func TestWaitReplicas(t *testing.T) {
	ctx := t.Context()
	t.Run("cluster with replicas", func(t *testing.T) {
		svc, err := service.Open(ctx, service.Config{RedisURL: testenv.ClusterURL(t), Namespace: testenv.UniqueName(t, "wait") + ":", WaitReplicas: 1, WaitTimeout: 5 * time.Second})
		require.NoError(t, err)
		defer svc.Close(ctx)
		created, err := svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u"})
		require.NoError(t, err)
		for i := range 5 {
			require.NoError(t, svc.AppendEvent(ctx, created.Session, &service.Event{InvocationID: "i", Author: "a",
				Actions: service.EventActions{StateDelta: map[string]any{"n": i, "app:n": i}}}))
		}
		got, err := svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: created.Session.ID()})
		require.NoError(t, err)
		require.Equal(t, 5, got.Session.Events().Len())
		n, err := got.Session.State().Get("app:n")
		require.NoError(t, err)
		require.Equal(t, 4.0, n)
	})
	t.Run("standalone without replicas", func(t *testing.T) {
		svc, err := service.Open(ctx, service.Config{RedisURL: testenv.RedisURL(t), Namespace: testenv.UniqueName(t, "wait") + ":", WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		require.NoError(t, err)
		defer svc.Close(ctx)
		_, err = svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
		require.True(t, errors.Is(err, base.ErrNotReplicated), "got %v", err)
	})
}
