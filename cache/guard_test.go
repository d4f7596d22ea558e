package cache

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/base"
)

// commandLog is a go-redis hook that records the names of the commands a
// client sends, but for those of a new connection's handshake.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			l.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmd redis.Cmder) {
	if name := cmd.Name(); name == "hello" || name == "client" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, cmd.Name())
}

// take returns the names recorded since the last take.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

// A read guard is the field's counter and the hash's epoch. The first read
// of a hash without an epoch sets one (HSETNX in a MULTI with its read);
// every other read is one HMGET, a read. After the hash is lost (FLUSHALL)
// the next read sets another epoch, so a counter back at the value read
// before is not the same guard.
func TestReadGuardEpoch(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	log := &commandLog{}
	rdb.AddHook(log)
	keys, err := NewKeys("unit:", 8)
	require.NoError(t, err)
	s := NewStore(rdb, Options{Keys: keys, Durable: true})
	key := keys.ShardKeys(keys.Shard("a", "u")).Guards
	field := GuardField(base.SessionRef{App: "a", User: "u", ID: "s"})
	read := func() ReadGuard {
		g, err := s.ReadGuard(ctx, base.SessionRef{App: "a", User: "u", ID: "s"})
		require.NoError(t, err)
		return g
	}

	first := read()
	require.Equal(t, []string{"hmget", "multi", "hsetnx", "hmget", "exec"}, log.take())
	epoch := m.HGet(key, guardEpoch)
	require.Len(t, epoch, 36, "a UUID")
	require.Equal(t, "@"+epoch, first.value, "no counter yet")

	require.Equal(t, first.value, read().value)
	require.Equal(t, []string{"hmget"}, log.take(), "a read only")
	m.HIncrBy(key, field, 1)
	require.Equal(t, "1@"+epoch, read().value)
	require.Equal(t, []string{"hmget"}, log.take())

	m.FlushAll()
	m.HIncrBy(key, field, 1) // a flush moved the counter back to the value read before
	again := read()
	require.Contains(t, log.take(), "hsetnx")
	require.True(t, strings.HasPrefix(again.value, "1@"))
	require.NotEqual(t, "1@"+epoch, again.value, "another epoch")
}
