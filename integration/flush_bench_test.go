package integration

// Write-behind benchmarks (docs/benchmarks.md, "Write-behind"), against the
// harness's Redis and Postgres:
//
//	integration/testenv.sh go test -run '^$' -bench 'Flush|ColdGet' -benchtime 1x ./integration/
//
// Figures and ratios are in docs/benchmarks.md ("Write-behind").

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// benchFleet creates n sessions over n users (so over many shards).
func benchFleet(b *testing.B, e *wbEnv, n int) []*service.Session {
	out := make([]*service.Session, n)
	for i := range out {
		resp, err := e.svc.Create(wbCtx(b), &service.CreateRequest{AppName: "bench", UserID: fmt.Sprint("u", i), SessionID: fmt.Sprint("s", i)})
		require.NoError(b, err)
		out[i] = resp.Session
	}
	return out
}

// appendForFlush appends one event of a typical size (~400 bytes of JSON).
func appendForFlush(ctx context.Context, svc *service.Service, s *service.Session, i int) error {
	return svc.AppendEvent(ctx, s, &service.Event{InvocationID: fmt.Sprint("inv-", i/4), Author: "model",
		Content: []byte(fmt.Sprintf(`{"role":"model","parts":[{"text":"reply %d: lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua"}]}`, i)),
		Actions: service.EventActions{StateDelta: map[string]any{"turn": i, "user:last": i}}})
}

// appendParallel appends total events spread over sessions with workers
// goroutines (one session per goroutine at a time, so no stale handles).
func appendParallel(b *testing.B, svc *service.Service, sessions []*service.Session, total int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := range len(sessions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > total {
					return
				}
				if err := appendForFlush(context.Background(), svc, sessions[w], i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkFlushThroughput: events per second a flusher writes into
// Postgres, draining a backlog appended beforehand (flusher disabled). A
// backlog of 5 000 events leaves each shard's batch short (about 180
// events); 50 000 fills the batches, as a sustained load does.
func BenchmarkFlushThroughput(b *testing.B) {
	for _, events := range []int{5000, 50000} {
		b.Run(fmt.Sprint("backlog=", events), func(b *testing.B) { benchFlushThroughput(b, events) })
	}
}

func benchFlushThroughput(b *testing.B, events int) {
	e := newWB(b, testenv.RedisURL(b), testenv.FreshDatabase(b), func(c *service.Config) {
		c.DisableFlusher = true
		c.ConcurrentAppends = true
	})
	sessions := benchFleet(b, e, 32)
	f := e.svc.NewFlusher(nil)
	total := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		appendParallel(b, e.svc, sessions, events)
		b.StartTimer()
		drain(b, f)
		total += events
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFlushLag: the maximum append rate (16 appenders, flusher
// running), then appends at half that rate for 5 s, sampling the flush lag
// (age of the oldest unflushed entry) every 50 ms: max and p99.
func BenchmarkFlushLag(b *testing.B) {
	e := newWB(b, testenv.RedisURL(b), testenv.FreshDatabase(b), func(c *service.Config) {
		c.ConcurrentAppends = true
	})
	sessions := benchFleet(b, e, 16)
	ctx := wbCtx(b)
	var maxRate, maxLag, p99Lag float64
	b.ReportAllocs()
	for b.Loop() {
		// Maximum rate.
		const burst = 3000
		start := time.Now()
		appendParallel(b, e.svc, sessions, burst)
		maxRate = burst / time.Since(start).Seconds()
		e.flush(e.svc)

		// Half of it, paced, for 5 s.
		rate := maxRate / 2
		interval := time.Duration(float64(time.Second) * float64(len(sessions)) / rate)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(interval)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if err := appendForFlush(context.Background(), e.svc, s, w*1_000_000+i); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		var lags []time.Duration
		for t0 := time.Now(); time.Since(t0) < 5*time.Second; {
			bl, err := e.svc.Backlog(ctx)
			require.NoError(b, err)
			lags = append(lags, bl.Lag)
			time.Sleep(50 * time.Millisecond) // the sampling period
		}
		close(stop)
		wg.Wait()
		slices.Sort(lags)
		maxLag = lags[len(lags)-1].Seconds()
		p99Lag = lags[len(lags)*99/100].Seconds()
		e.flush(e.svc)
	}
	b.ReportMetric(maxRate, "max-appends/s")
	b.ReportMetric(maxRate/2, "paced-appends/s")
	b.ReportMetric(maxLag, "max-lag-s")
	b.ReportMetric(p99Lag, "p99-lag-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkColdGet1000: a full Get of a 1 000-event session that Redis
// lost (its keys deleted before every iteration): read from Postgres and
// put back into Redis. BenchmarkWarmGet1000 is the same Get from Redis.
func BenchmarkColdGet1000(b *testing.B) { benchGet1000(b, true) }

func BenchmarkWarmGet1000(b *testing.B) { benchGet1000(b, false) }

func benchGet1000(b *testing.B, cold bool) {
	e := newWB(b, testenv.RedisURL(b), testenv.FreshDatabase(b), nil)
	ctx := wbCtx(b)
	s := benchFleet(b, e, 1)[0]
	for i := range 1000 {
		require.NoError(b, appendForFlush(ctx, e.svc, s, i))
	}
	e.flush(e.svc)
	k := e.sessionKeys("bench", "u0", "s0")
	req := &service.GetRequest{AppName: "bench", UserID: "u0", SessionID: "s0"}
	b.ReportAllocs()
	for b.Loop() {
		if cold {
			b.StopTimer()
			require.NoError(b, e.rdb.Del(ctx, k.Session, k.Events, k.User, k.Undo).Err())
			b.StartTimer()
		}
		got, err := e.svc.Get(ctx, req)
		if err != nil || got.Session.Events().Len() != 1000 {
			b.Fatalf("get: %v", err)
		}
	}
}

// BenchmarkColdGetVsRaw measures a cold Get of a 1 000-event session (its
// keys deleted before each read, so it is read from Postgres and put back
// into Redis) against reading the same rows from Postgres raw (the
// session's row, its events in order, its app and user state: the four
// queries of ADK's get_session), alternately in one loop; with the
// write-behind on (the reading service runs a flusher) and off
// (Config.DisableFlusher).
func BenchmarkColdGetVsRaw(b *testing.B) {
	e := newWB(b, testenv.RedisURL(b), testenv.FreshDatabase(b), nil)
	ctx := wbCtx(b)
	s := benchFleet(b, e, 1)[0]
	for i := range 1000 {
		require.NoError(b, appendForFlush(ctx, e.svc, s, i))
	}
	e.flush(e.svc)
	off := e.cfg
	off.DisableFlusher = true
	readers := map[string]*service.Service{"write-behind=on": e.svc, "write-behind=off": e.open(off)}
	k := e.sessionKeys("bench", "u0", "s0")
	req := &service.GetRequest{AppName: "bench", UserID: "u0", SessionID: "s0"}
	for _, name := range []string{"write-behind=on", "write-behind=off"} {
		svc := readers[name]
		b.Run(name, func(b *testing.B) {
			var cold, raw time.Duration
			for b.Loop() {
				require.NoError(b, e.rdb.Del(ctx, k.Session, k.Events, k.EventIDs, k.User, k.Undo).Err())
				start := time.Now()
				got, err := svc.Get(ctx, req)
				cold += time.Since(start)
				if err != nil || got.Session.Events().Len() != 1000 {
					b.Fatalf("get: %v", err)
				}
				start = time.Now()
				if n := rawGetSession(b, e, "bench", "u0", "s0"); n != 1000 {
					b.Fatalf("raw read: %d events", n)
				}
				raw += time.Since(start)
			}
			b.ReportMetric(float64(cold.Microseconds())/1e3/float64(b.N), "cold-ms")
			b.ReportMetric(float64(raw.Microseconds())/1e3/float64(b.N), "raw-ms")
			b.ReportMetric(float64(cold)/float64(raw), "ratio")
		})
	}
}

// rawGetSession reads a session's rows as ADK's get_session does, each
// column into bytes; it returns the number of events.
func rawGetSession(b *testing.B, e *wbEnv, app, user, sid string) int {
	ctx := wbCtx(b)
	var state, appState, userState []byte
	var update time.Time
	require.NoError(b, e.db.QueryRowContext(ctx, `SELECT state, update_time FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3`,
		app, user, sid).Scan(&state, &update))
	rows, err := e.db.QueryContext(ctx, `SELECT id, invocation_id, "timestamp", event_data FROM events
WHERE app_name = $1 AND user_id = $2 AND session_id = $3 ORDER BY "timestamp"`, app, user, sid)
	require.NoError(b, err)
	n := 0
	for rows.Next() {
		var id, inv string
		var ts time.Time
		var data []byte
		require.NoError(b, rows.Scan(&id, &inv, &ts, &data))
		n++
	}
	require.NoError(b, rows.Err())
	require.NoError(b, e.db.QueryRowContext(ctx, `SELECT state FROM app_states WHERE app_name = $1`, app).Scan(&appState))
	require.NoError(b, e.db.QueryRowContext(ctx, `SELECT state FROM user_states WHERE app_name = $1 AND user_id = $2`, app, user).Scan(&userState))
	return n
}
