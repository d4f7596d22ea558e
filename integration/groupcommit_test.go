package integration

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestGroupCommitStandalone(t *testing.T) {
	t.Parallel()
	testGroupCommit(t, testenv.RedisURL(t))
}

func TestGroupCommitCluster(t *testing.T) {
	t.Parallel()
	testGroupCommit(t, testenv.ClusterURL(t))
}

// testGroupCommit: 64 goroutines append at once, each to its own session,
// and every fourth also through a stale handle: the writes share round
// trips, yet each append gets its own answer (the stale ones
// ErrStaleSession with nothing written, the others their event, once, in
// order, with its state).
func testGroupCommit(t *testing.T, url string) {
	e := newWB(t, url, "", nil)
	const writers, each = 64, 30
	sessions := make([]*service.Session, writers)
	stale := make([]*service.Session, writers)
	for w := range writers {
		sessions[w] = e.create(e.svc, "gc", fmt.Sprintf("u%d", w), "s", nil)
		stale[w] = e.getSess("gc", fmt.Sprintf("u%d", w), "s")
	}
	before := e.svc.WriteStats()
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := &service.Event{ID: fmt.Sprintf("e-%d-%d", w, i), InvocationID: "inv", Author: "a",
					Actions: service.EventActions{StateDelta: map[string]any{"n": i, "user:last": i}}}
				if err := e.svc.AppendEvent(wbCtx(t), sessions[w], ev); err != nil {
					errs <- err
				}
				if w%4 == 0 && i > 0 {
					err := e.svc.AppendEvent(wbCtx(t), stale[w], &service.Event{InvocationID: "inv", Author: "stale"})
					if !errors.Is(err, service.ErrStaleSession) {
						errs <- fmt.Errorf("writer %d: stale handle: %v", w, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	after := e.svc.WriteStats()
	calls, trips := after.Calls-before.Calls, after.RoundTrips-before.RoundTrips
	require.Less(t, trips, calls, "no two writes shared a round trip")
	t.Logf("%d write scripts in %d round trips", calls, trips)
	for w := range writers {
		got := e.getSess("gc", fmt.Sprintf("u%d", w), "s")
		require.Equal(t, each, got.Events().Len(), "writer %d", w)
		for i := range each {
			require.Equal(t, fmt.Sprintf("e-%d-%d", w, i), got.Events().At(i).ID)
		}
		require.Equal(t, map[string]any{"n": float64(each - 1), "user:last": float64(each - 1)}, stateMap(got))
	}
}
