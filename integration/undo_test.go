package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestUndoBounded: a 50 KB session key overwritten 20 times, one invocation
// per event. The undo records rewind keeps hold raw previous values (no
// JSON re-encoding, no copy of the whole state), so they take no more
// memory than the events themselves; and a rewind still brings back the
// value of the invocation before.
func TestUndoBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testenv.RedisURL(t), nil)
	ctx := ctxT(t)
	const rounds, size = 20, 50_000
	s := e.create("app", "u", "s", nil)
	value := func(i int) string { return fmt.Sprintf("%02d", i) + strings.Repeat("x", size-2) }
	for i := range rounds {
		e.append(s, &service.Event{Author: "agent", InvocationID: fmt.Sprint("inv-", i),
			Actions: service.EventActions{StateDelta: map[string]any{"big": value(i)}}})
	}
	k := e.keys.Session("app", "u", "s")
	undo, err := e.rdb.MemoryUsage(ctx, k.Undo, 0).Result()
	require.NoError(t, err)
	events, err := e.rdb.MemoryUsage(ctx, k.Events, 0).Result()
	require.NoError(t, err)
	t.Logf("%d appends of a %d-byte key: undo records %d bytes, events %d bytes (%.2f)", rounds, size, undo, events, float64(undo)/float64(events))
	require.LessOrEqual(t, undo, events, "undo records must not outweigh the events they undo")

	_, err = e.svc.Rewind(ctx, &service.RewindRequest{AppName: "app", UserID: "u", SessionID: "s", BeforeInvocationID: "inv-10"})
	require.NoError(t, err)
	got := stateOf(e.getS("app", "u", "s"))["big"]
	require.Equal(t, value(9), got, "rewind before inv-10 gives inv-9's value")
}
