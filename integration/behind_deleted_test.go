package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestUserWriteAfterBatchOverLostCopy: a FLUSHALL while a batch waits on a
// row lock, a cold read of the session (Redis then holds less than the
// database once the batch commits, and its next event takes a seq the
// database gave another), then a user: write acknowledged after it; the
// session is deleted before the flusher reads that write (Deleted), or not.
// The user's state ends with the write (cluster single seed 453886576027:
// the rebase of the user took the deleted session's write for one the
// database held, by its seq).
func TestUserWriteAfterBatchOverLostCopy(t *testing.T) {
	for _, tc := range []struct {
		name         string
		past, delete bool
	}{{"Now", false, false}, {"Past", true, false}, {"NowDeleted", false, true}, {"PastDeleted", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			e := newWB(t, srv.URL, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
			ctx := wbCtx(t)
			f := newManualFlusher(t, e)
			k := sessKey{"app", "u", "s"}
			sess := e.create(e.svc, k.app, k.user, k.sid, nil)
			e.mustAppend(e.svc, sess, "i1", "one", map[string]any{"k": 1})
			f.drain()
			e.mustAppend(e.svc, sess, "i2", "two", map[string]any{"user:u2": "A"})

			cold := f.flushAllDuringPass(k)
			require.Equal(t, 1, cold.Events().Len(), "the cold read serves what the database held then")

			got, err := e.svc.Get(ctx, &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid})
			require.NoError(t, err)
			ev := &service.Event{InvocationID: "i3", Author: "model",
				Actions: service.EventActions{StateDelta: map[string]any{"user:u2": map[string]any{}}}}
			if tc.past {
				ev.Timestamp = time.UnixMicro(1704067201206464)
			}
			require.NoError(t, e.svc.AppendEvent(ctx, got.Session, ev))
			if tc.delete {
				require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: k.app, UserID: k.user, SessionID: k.sid}))
			}
			f.drain()
			e.requireUserState(k.app, k.user, map[string]any{"u2": map[string]any{}})
		})
	}
}
