package service

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
)

// A handle keeps its session's Redis keys after its first append, as the
// Service that appended named them: a handle given to a Service of another
// namespace is appended with that Service's keys (the session is not there:
// ErrNotFound), never into the first namespace.
func TestHandleKeysFollowTheService(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(ns string) *Service {
		svc, err := Open(ctx, Config{RedisURL: testenv.RedisURL(t), Namespace: testenv.UniqueName(t, ns) + ":"})
		require.NoError(t, err)
		t.Cleanup(func() { svc.Close(context.Background()) })
		return svc
	}
	a, b := open("keys-a-"), open("keys-b-")
	resp, err := a.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	h := resp.Session
	event := func(text string) *Event {
		return &Event{Author: "user", InvocationID: "i", Content: json.RawMessage(`{"parts":[{"text":"` + text + `"}]}`)}
	}
	require.NoError(t, a.AppendEvent(ctx, h, event("one")))
	require.ErrorIs(t, b.AppendEvent(ctx, h, event("two")), ErrNotFound)

	got, err := a.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, 1, got.Session.Events().Len())
	_, err = b.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.ErrorIs(t, err, ErrNotFound)
}
