package integration

// The prune's throughput (docs/operations.md, "Retention"), against the harness's Redis and
// Postgres:
//
//	integration/testenv.sh go test -run '^$' -bench PruneThroughput -benchtime 1x ./integration/
//
// Figures are in docs/operations.md ("Retention").

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/persist"
	"github.com/adksession/adksession/service"
)

// BenchmarkPruneThroughput prunes 20 000 idle sessions of 10 events each
// (~400 bytes of JSON per event) that Redis no longer holds, as a prune
// usually finds them, in batches of 500: sessions and events deleted per
// second.
func BenchmarkPruneThroughput(b *testing.B) {
	const sessions, events, users = 20000, 10, 2000
	e := newWB(b, testenv.RedisURL(b), testenv.FreshDatabase(b), nil)
	ctx := context.Background()
	store, err := persist.Open(ctx, e.cfg.DatabaseURL)
	require.NoError(b, err)
	defer store.Close()
	var pruned, deletedEvents int64
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		seedIdle(b, store, sessions, events, users)
		b.StartTimer()
		start := time.Now()
		sum, err := e.svc.Prune(ctx, &service.PruneRequest{IdleFor: 30 * 24 * time.Hour})
		took += time.Since(start)
		require.NoError(b, err)
		require.Equal(b, int64(sessions), sum.Sessions)
		require.Equal(b, int64(sessions*events), sum.Events)
		require.Equal(b, int64(users), sum.UserStates)
		pruned, deletedEvents = pruned+sum.Sessions, deletedEvents+sum.Events
	}
	b.ReportMetric(float64(pruned)/took.Seconds(), "sessions/s")
	b.ReportMetric(float64(deletedEvents)/took.Seconds(), "events/s")
}

// seedIdle writes n sessions of events events each over users users, last
// updated long ago, straight into the database (as the flusher would have,
// in batches of 500 sessions).
func seedIdle(b *testing.B, store *persist.Store, n, events, users int) {
	ctx := context.Background()
	for lo := 0; lo < n; lo += 500 {
		batch := &persist.Batch{}
		for i := lo; i < min(lo+500, n); i++ {
			k := base.SessionRef{App: "bench", User: fmt.Sprint("u", i%users), ID: fmt.Sprint("s", i)}
			created := longAgo.Add(time.Duration(i) * time.Millisecond)
			up := persist.SessionUpsert{Key: k, Incarnation: created.UnixMicro(), Rev: int64(events), CreateTime: created, UpdateTime: created}
			for j := 1; j <= events; j++ {
				ts := created.Add(time.Duration(j) * time.Microsecond)
				up.Events = append(up.Events, persist.EventRow{ID: fmt.Sprintf("e%d-%d", i, j), InvocationID: "inv", Timestamp: ts, Seq: int64(j),
					Data: fmt.Appendf(nil, `{"author":"model","content":{"role":"model","parts":[{"text":"reply %d: lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua"}]},"actions":{"state_delta":{"turn":%d},"artifact_delta":{},"requested_auth_configs":{},"requested_tool_confirmations":{}}}`, j, j)})
				up.UpdateTime = ts
			}
			batch.Sessions = append(batch.Sessions, up)
			batch.UserStates = append(batch.UserStates, persist.StateUpsert{AppName: k.App, UserID: k.User, Rev: 1, UpdateTime: created})
		}
		require.NoError(b, store.Apply(ctx, batch))
	}
}
