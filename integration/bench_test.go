package integration

// Benchmarks of docs/benchmarks.md on a real standalone Redis (no database):
// appends at concurrency 1, 10 and 100 next to the EVALSHA ceiling measured in
// the same run (ceiling_test.go), windowed and full Gets, and the flatness of
// windows over the history length. Run them through the harness:
//
//	integration/testenv.sh go test -run '^$' -bench . -benchtime 3s -count 3 ./integration/
//
// docs/benchmarks.md records the figures and what they mean. Benchmarks are
// not tests: nothing here asserts on timing, only on the data.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// benchEventBytes is the size of the stored JSON of every benchmark event.
const benchEventBytes = 1024

// benchContent is a model's text reply, sized so that a benchmark event's
// stored JSON (id, invocation, author, timestamp, content, a one-key state
// delta) is benchEventBytes.
var benchContent = sync.OnceValue(func() []byte {
	content := func(text string) []byte {
		return []byte(`{"role":"model","parts":[{"text":"` + text + `"}]}`)
	}
	ev := benchEvent(content(""), "inv-1", 1000000)
	ev.ID = uuid.NewString()
	ev.Timestamp = time.Now()
	blob, err := ev.MarshalJSON()
	if err != nil {
		panic(err)
	}
	text := strings.Repeat("All work and no play makes Jack a dull boy. ", benchEventBytes/44+1)
	return content(text[:benchEventBytes-len(blob)])
})

// benchEvent is an agent's event of invocation inv that sets the session key
// "counter".
func benchEvent(content []byte, inv string, counter int) *service.Event {
	return &service.Event{InvocationID: inv, Author: "agent", Content: content,
		Actions: service.EventActions{StateDelta: map[string]any{"counter": float64(counter)}}}
}

// openBench opens a service on the harness's standalone Redis in a namespace
// of its own; it is closed when b ends.
func openBench(b *testing.B, concurrent bool) (*service.Service, string, string) {
	b.Helper()
	redisURL := testenv.RedisURL(b)
	ns := testenv.UniqueName(b, "bench-") + ":"
	svc, err := service.Open(context.Background(), service.Config{RedisURL: redisURL, Namespace: ns, ConcurrentAppends: concurrent})
	require.NoError(b, err)
	return svc, redisURL, ns
}

// percentile is the q-quantile of d in µs (d is sorted in place).
func percentile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3
}

// mean is the mean of d in µs.
func mean(d []time.Duration) float64 {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum.Nanoseconds()) / 1e3 / float64(max(len(d), 1))
}

// histories holds the sessions the Get benchmarks read: one per history
// length, filled once per process in a namespace of their own (the harness's
// Redis is thrown away afterwards) and shared by every Get benchmark and -count.
var histories struct {
	mu     sync.Mutex
	svc    *service.Service
	url    string          // its Redis
	ns     string          // its namespace
	filled map[string]bool // session ids
}

const historyApp, historyUser = "bench", "reader"

// historySession returns a service and the id of a session holding n
// benchmark events (~1 KiB each).
func historySession(b *testing.B, n int) (*service.Service, string) {
	b.Helper()
	return filledSession(b, fmt.Sprintf("h%d", n), func(svc *service.Service, created *service.Session) {
		prefill(b, svc, created.ID(), n)
	})
}

// filledSession returns the service of histories and session sid of
// historyApp/historyUser, created and filled by fill once per process.
func filledSession(b *testing.B, sid string, fill func(svc *service.Service, created *service.Session)) (*service.Service, string) {
	b.Helper()
	histories.mu.Lock()
	defer histories.mu.Unlock()
	if histories.svc == nil {
		histories.svc, histories.url, histories.ns = openBench(b, true)
		histories.filled = map[string]bool{}
	}
	if !histories.filled[sid] {
		start := time.Now()
		created, err := histories.svc.Create(context.Background(), &service.CreateRequest{AppName: historyApp, UserID: historyUser, SessionID: sid})
		require.NoError(b, err)
		fill(histories.svc, created.Session)
		histories.filled[sid] = true
		b.Logf("filled session %s in %v", sid, time.Since(start).Round(time.Millisecond))
	}
	return histories.svc, sid
}

// prefill appends n benchmark events to session sid of historyApp/historyUser
// from several goroutines (the service must have ConcurrentAppends). Each has a
// handle of its own, read again every prefillChunk appends, so that no handle
// holds the whole history.
func prefill(b *testing.B, svc *service.Service, sid string, n int) {
	b.Helper()
	const workers, prefillChunk = 4, 256
	content := benchContent()
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			ctx := context.Background()
			var sess *service.Session
			for i, done := w, 0; i < n; i, done = i+workers, done+1 {
				if done%prefillChunk == 0 {
					resp, err := svc.Get(ctx, &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: 1})
					if err != nil {
						errs[w] = err
						return
					}
					sess = resp.Session
				}
				if err := svc.AppendEvent(ctx, sess, benchEvent(content, fmt.Sprintf("inv-%d", i/100), i)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(b, errors.Join(errs...))
}

// benchGet runs req in b.Loop, checks that each read returns want events, and
// reports p50/p99 latency.
func benchGet(b *testing.B, svc *service.Service, req *service.GetRequest, want int) {
	ctx := context.Background()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		resp, err := svc.Get(ctx, req)
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if got := resp.Session.Events().Len(); got != want {
			b.Fatalf("Get returned %d events, want %d", got, want)
		}
	}
	b.ReportMetric(percentile(lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(lat, 0.99), "p99-µs")
}

// BenchmarkFullGetVsFetch measures a full Get of sessions of 200, 2 000
// and 10 000 events (~1 KiB each) against its raw fetch: one ZRANGE of the
// same events zset and json.Valid on each member, timed alternately in the
// same loop. It reports both (ms), their ratio, and the Get's allocations
// and bytes per event.
func BenchmarkFullGetVsFetch(b *testing.B) {
	for _, n := range []int{200, 2000, 10000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			svc, sid := historySession(b, n)
			ctx := context.Background()
			rdb, err := cache.NewClient(histories.url)
			require.NoError(b, err)
			defer rdb.Close()
			keys, err := cache.NewKeys(histories.ns, svc.Config().Shards)
			require.NoError(b, err)
			zset := keys.Session(historyApp, historyUser, sid).Events
			req := &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid}
			var get, fetch time.Duration
			var allocs, bytes uint64
			var ms0, ms1 runtime.MemStats
			for b.Loop() {
				start := time.Now()
				members, err := rdb.ZRange(ctx, zset, 0, -1).Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range members {
					if !json.Valid([]byte(m[strings.IndexByte(m, ':')+1:])) {
						b.Fatal("invalid JSON in the events zset")
					}
				}
				fetch += time.Since(start)
				if len(members) != n {
					b.Fatalf("ZRANGE returned %d members, want %d", len(members), n)
				}
				runtime.ReadMemStats(&ms0)
				start = time.Now()
				resp, err := svc.Get(ctx, req)
				get += time.Since(start)
				runtime.ReadMemStats(&ms1)
				if err != nil {
					b.Fatal(err)
				}
				if got := resp.Session.Events().Len(); got != n {
					b.Fatalf("Get returned %d events, want %d", got, n)
				}
				allocs += ms1.Mallocs - ms0.Mallocs
				bytes += ms1.TotalAlloc - ms0.TotalAlloc
			}
			runs := float64(b.N)
			b.ReportMetric(float64(get.Microseconds())/1e3/runs, "get-ms")
			b.ReportMetric(float64(fetch.Microseconds())/1e3/runs, "fetch-ms")
			b.ReportMetric(float64(get)/float64(fetch), "ratio")
			b.ReportMetric(float64(allocs)/runs/float64(n), "get-allocs/event")
			b.ReportMetric(float64(bytes)/runs/float64(n), "get-B/event")
		})
	}
}

// windowHistories are the history lengths of the window benchmarks.
var windowHistories = []int{100, 10000, 100000}

// BenchmarkWindowGet measures Get with NumRecentEvents=10 on sessions of 100,
// 10 000 and 100 000 events: the cost should not depend on the history.
func BenchmarkWindowGet(b *testing.B) {
	for _, n := range windowHistories {
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			svc, sid := historySession(b, n)
			benchGet(b, svc, &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: 10}, 10)
		})
	}
}

// BenchmarkWindowGetAfter is BenchmarkWindowGet with the other window: After
// the timestamp of the 10th newest event (inclusive), so again 10 events.
func BenchmarkWindowGetAfter(b *testing.B) {
	for _, n := range windowHistories {
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			svc, sid := historySession(b, n)
			req := &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, After: tenthNewest(b, svc, sid)}
			benchGet(b, svc, req, 10)
		})
	}
}

func tenthNewest(b *testing.B, svc *service.Service, sid string) time.Time {
	b.Helper()
	resp, err := svc.Get(context.Background(), &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: 10})
	require.NoError(b, err)
	require.Equal(b, 10, resp.Session.Events().Len())
	return resp.Session.Events().At(0).Timestamp
}

// BenchmarkWindowFlatness reads the 10 newest events of the 100-event and of
// the 100 000-event session alternately in one loop, so both see the same
// machine load, and reports their mean and p50 latency and ratio = mean
// latency at 100 000 ÷ at 100 (target <= 1.3). ns/op covers both reads.
func BenchmarkWindowFlatness(b *testing.B) {
	svc, small := historySession(b, 100)
	_, large := historySession(b, 100000)
	ctx := context.Background()
	read := func(sid string, lat *[]time.Duration) {
		start := time.Now()
		resp, err := svc.Get(ctx, &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: 10})
		*lat = append(*lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if got := resp.Session.Events().Len(); got != 10 {
			b.Fatalf("Get returned %d events, want 10", got)
		}
	}
	var ls, ll []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			read(small, &ls)
			read(large, &ll)
		} else {
			read(large, &ll)
			read(small, &ls)
		}
	}
	b.ReportMetric(mean(ls), "h100-mean-µs")
	b.ReportMetric(mean(ll), "h100k-mean-µs")
	b.ReportMetric(mean(ll)/mean(ls), "ratio")
	b.ReportMetric(percentile(ll, 0.5)/percentile(ls, 0.5), "ratio-p50")
}

// BenchmarkFullGet measures Get of a whole 2 000-event session (~2 MiB of
// events).
func BenchmarkFullGet(b *testing.B) {
	const n = 2000
	b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
		svc, sid := historySession(b, n)
		benchGet(b, svc, &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid}, n)
	})
}
