package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestDrainRetriesDatabaseDown: the drain on Stop (what Service.Close runs)
// over a Postgres that refuses connections when it starts keeps retrying
// until Postgres is back, within its budget: every acknowledged append ends
// up in the database. Postgres is started again once the drain has failed
// a pass (or once Stop returned: a drain that gives up on its first error
// leaves the appends in Redis and the rows missing).
func TestDrainRetriesDatabaseDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	e := newWB(t, testenv.RedisURL(t), pg.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	s := e.create(e.svc, "app", "u", "s", map[string]any{"k": "v"})
	for i := range 5 {
		e.mustAppend(e.svc, s, "inv", fmt.Sprint("e", i), map[string]any{"i": i})
	}
	f := e.svc.NewFlusher(nil) // never started: Stop is its only drain
	pg.Stop(t, "fast")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- f.Stop(ctx) }()
	var stopErr error
	returned := false
	deadline := time.Now().Add(time.Minute)
	for f.Stats().Retries == 0 && !returned {
		select {
		case stopErr = <-stopped:
			returned = true
		case <-time.After(10 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the drain neither failed a pass nor returned")
	}
	pg.Start(t)
	if !returned {
		stopErr = <-stopped
	}
	require.NoError(t, stopErr, "the drain gave up although its budget had time left")
	require.Zero(t, e.backlog(e.svc).Entries, "the drain left entries in the change log")
	checkDB(t, e.db, e.model)
}
