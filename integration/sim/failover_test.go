package sim

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
)

// TestFailoverSameShardAgain: the harness fails over a shard whose master
// took over a moment ago, again and again while writes go on: each time it
// waits for the replica (the old master) to be ready (readyReplica: in sync,
// and known as the master's replica to every node) and for its last election
// to be over (electionVotes), rather than finding no replica, as the
// simulation did (cluster concurrent seeds 213296038499 and 1095823811492);
// each failover is done once the old master is the new one's replica, and no
// acknowledged write is lost. Without those waits it failed in three ways:
// the old master still serving the slots after the failover, a manual
// failover timing out (asked of a node its master did not know as its
// replica yet), and a node "winning" on its last election's votes and then
// being turned back into a replica.
func TestFailoverSameShardAgain(t *testing.T) {
	t.Parallel()
	e := &env{servers: &servers{cluster: testenv.StartCluster(t)}, t: t}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.cluster.Addrs})
	defer rdb.Close()
	ctx := context.Background()
	const key = "{failover}n"
	m, err := rdb.MasterForKey(ctx, key)
	require.NoError(t, err)
	master := m.Options().Addr
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range e.cluster.Nodes { // what each node did, for the failure
			b, _ := os.ReadFile(n.LogFile)
			t.Logf("%s:\n%s", n.Addr, b)
		}
	})

	var acked atomic.Int64 // the counter's last acknowledged value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			if n, err := rdb.Incr(ctx, key).Result(); err == nil {
				acked.Store(n)
			}
			cancel()
		}
	}()
	for i := range 4 {
		start := time.Now()
		next, waited, err := e.failoverOf(master)
		t.Logf("failover %d: ready after %v, done after %v", i+1, waited, time.Since(start))
		require.NoError(t, err, "failover %d of the shard", i+1)
		require.Contains(t, e.masters(), next, "the replica took over")
		require.NotContains(t, e.masters(), master, "the old master is no shard's master")
		master = next
	}
	close(stop)
	wg.Wait()
	require.Positive(t, acked.Load())
	var n int64
	require.NoError(t, faultRetry(ctx, func() (err error) {
		n, err = rdb.Get(ctx, key).Int64()
		return err
	}))
	require.GreaterOrEqual(t, n, acked.Load(), "the counter holds every acknowledged increment")
}
