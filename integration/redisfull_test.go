package integration

// A full Redis (docs/design.md, "Write-behind"): under maxmemory
// with volatile-lru, appends refused while Redis is full fail with
// ErrRedisFull and write nothing; the write-behind's own writes still run,
// so the backlog drains, flushed sessions get their TTL and are evicted,
// memory drops below maxmemory by itself, and appends succeed again.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// usedMemory reads used_memory and maxmemory from INFO memory.
func (e *wbEnv) usedMemory() (used, max int64) {
	e.t.Helper()
	info, err := e.rdb.Info(wbCtx(e.t), "memory").Result()
	require.NoError(e.t, err)
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "used_memory":
			used, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory":
			max, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return used, max
}

func TestRedisFullRecovers(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t, "--maxmemory", "48mb", "--maxmemory-policy", "volatile-lru")
	e := newWB(t, srv.URL, testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
	payload := strings.Repeat("x", 4096)

	// Fill Redis with unflushed events until it refuses appends.
	const workers, perWorker = 8, 4
	var sessions [workers][]*service.Session
	for w := range workers {
		for i := range perWorker {
			sessions[w] = append(sessions[w], e.create(e.svc, "app", fmt.Sprintf("u%d", w), fmt.Sprintf("s%d", i), map[string]any{"c": 0}))
		}
	}
	// At most 4 x maxmemory of payload: a Redis that never refuses fails
	// the test instead of growing without bound.
	const most = 4 * 48 << 20 / 4096
	fill := func() (acked, refused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for n := 0; n < most/workers; n++ {
					s := sessions[w][n%perWorker]
					err := e.appendEv(e.svc, s, fmt.Sprintf("i%d", n/perWorker), payload, map[string]any{"c": n, "user:n": n})
					mu.Lock()
					switch {
					case err == nil:
						acked++
					case errors.Is(err, service.ErrRedisFull):
						// Redis's own reply stays in the chain (the HTTP API answers 503 for it).
						var re redis.Error
						if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "OOM ") {
							t.Errorf("refused append: %v does not wrap Redis's OOM reply", err)
						}
						refused++
					default:
						t.Errorf("append: %v", err)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		return acked, refused
	}
	acked, refused := fill()
	used, max := e.usedMemory()
	t.Logf("%d appends acknowledged (%d MB of payload), then %d refused as full; used_memory %d MB of %d MB",
		acked, acked*len(payload)>>20, refused, used>>20, max>>20)
	require.Equal(t, workers, refused, "every appender ends with ErrRedisFull")
	require.Greater(t, acked, 1000)

	// A flusher process starts on the full Redis and drains the backlog.
	flusher := e.open(func() service.Config { c := e.cfg; c.DisableFlusher = false; return c }())
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, flusher.Flush(ctx), "Flush completes on a full Redis")
	t.Logf("flushed in %v", time.Since(start).Round(time.Millisecond))

	// Flushed sessions are evictable: memory drops below maxmemory by itself.
	waitUntil(t, time.Minute, "used_memory below maxmemory", func() bool {
		used, max := e.usedMemory()
		return used < max
	})
	used, _ = e.usedMemory()
	t.Logf("used_memory after the flush: %d MB", used>>20)

	// Appends succeed again (to sessions Redis may have evicted, read back
	// from the database, and to new ones).
	for w := range workers {
		for _, s := range sessions[w] {
			fresh, err := e.svc.Get(wbCtx(t), &service.GetRequest{AppName: s.AppName(), UserID: s.UserID(), SessionID: s.ID()})
			require.NoError(t, err)
			e.mustAppend(e.svc, fresh.Session, "after", "after", map[string]any{"after": true})
		}
	}
	s := e.create(e.svc, "app", "new", "s", nil)
	e.mustAppend(e.svc, s, "after", "after", nil)
	require.NoError(t, flusher.Flush(ctx))

	// Every acknowledged event is in Postgres once, in order; nothing refused is.
	checkDB(t, e.db, e.model)
	var total int
	require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM events`).Scan(&total))
	require.Equal(t, acked+workers*perWorker+1, total)
}
