package integration

// Takeover (docs/operations.md, "Flushers taking over"): a flusher that stops cleanly hands its shards
// over at once; one that dies keeps them for Config.FlushLeaseTTL.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// takeoverFleet writes one session per user over many users (so over many
// shards), through svc, and returns the shards they are in.
func takeoverFleet(t *testing.T, e *wbEnv, svc *service.Service, prefix string, n int) map[int]bool {
	t.Helper()
	shards := map[int]bool{}
	for i := range n {
		user := fmt.Sprintf("%s-u%d", prefix, i)
		s := e.create(svc, "app", user, "s", nil)
		e.mustAppend(svc, s, "inv", "hello", map[string]any{"k": i})
		shards[e.keys.Shard("app", user)] = true
	}
	return shards
}

// heldLeases counts the shards in shards whose flusher lease is held.
func (e *wbEnv) heldLeases(shards map[int]bool) int {
	e.t.Helper()
	n := 0
	for shard := range shards {
		_, err := e.rdb.Get(wbCtx(e.t), e.keys.ShardKeys(shard).Lease).Result()
		if err == nil {
			n++
		} else {
			require.ErrorIs(e.t, err, redis.Nil)
		}
	}
	return n
}

// drained polls until the change log is empty, or fails at the deadline.
func (e *wbEnv) drained(svc *service.Service, within time.Duration, why string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		b, err := svc.Backlog(wbCtx(e.t))
		return err == nil && b.Entries == 0
	}, within, 20*time.Millisecond, why)
}

// TestTakeoverAfterClose: process A flushes (so it holds the leases of the
// shards it wrote), then closes: it holds no lease after Close. Appends go
// on through process B, whose flusher takes A's shards on its next poll:
// everything is flushed within half A's lease time (60 s here), which it
// would have to wait for if A had kept its leases.
func TestTakeoverAfterClose(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
		c.FlushLeaseTTL = time.Minute
	})
	shards := takeoverFleet(t, e, e.svc, "a", 40)
	e.flush(e.svc)
	require.Equal(t, len(shards), e.heldLeases(shards), "A holds the leases of the shards it flushed")

	cfgB := e.cfg
	cfgB.DisableFlusher = true
	b := e.open(cfgB)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, e.svc.Close(ctx))
	require.Zero(t, e.heldLeases(shards), "leases left after A's Close")

	takeoverFleet(t, e, b, "b", 40) // mostly the same shards: A's
	fb := b.NewFlusher(nil)
	fb.Start(ctx)
	defer fb.Stop(ctx)
	e.drained(b, 30*time.Second, "B did not take A's shards")
	checkDB(t, e.db, e.model)
}

// TestTakeoverAfterCrash: a flusher that dies (it stops renewing, and
// gives nothing up) keeps its shards for its lease time, Config.
// FlushLeaseTTL: its leases expire within 5 s here (not the default 15 s;
// long enough that the pass which takes them ends before the first expires,
// even on a loaded machine), then another process flushes them.
func TestTakeoverAfterCrash(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) {
		c.DisableFlusher = true
		c.FlushLeaseTTL = 5 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shards := takeoverFleet(t, e, e.svc, "a", 40)
	crashed := e.svc.NewFlusher(nil)
	_, err := crashed.RunOnce(ctx) // takes the leases, flushes a batch, then "dies": never stopped
	require.NoError(t, err)
	require.Equal(t, len(shards), e.heldLeases(shards))
	for shard := range shards {
		ttl := e.pttl(e.keys.ShardKeys(shard).Lease)
		require.True(t, ttl > 0 && ttl <= 5*time.Second, "lease of shard %d for %s, want at most FlushLeaseTTL (5s)", shard, ttl)
	}
	takeoverFleet(t, e, e.svc, "b", 40)

	cfgB := e.cfg
	cfgB.DisableFlusher = false
	cfgB.FlushLeaseTTL = 0 // B's own lease time does not matter
	b := e.open(cfgB)
	e.drained(b, 30*time.Second, "B did not take the dead flusher's shards after their lease")
	checkDB(t, e.db, e.model)
}

// TestFlushLeaseTTLRefused: a lease time under a second is
// ErrInvalidArgument: a live flusher could lose its shards between two
// batches.
func TestFlushLeaseTTLRefused(t *testing.T) {
	t.Parallel()
	_, err := service.Open(context.Background(), service.Config{RedisURL: testenv.RedisURL(t), FlushLeaseTTL: 500 * time.Millisecond})
	require.ErrorIs(t, err, service.ErrInvalidArgument)
	require.Contains(t, err.Error(), "Config.FlushLeaseTTL")
}
