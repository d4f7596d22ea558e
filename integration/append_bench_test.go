package integration

// Append benchmarks of docs/benchmarks.md, each ratio
// taken against references measured in the same run (ceiling_test.go): the
// minimal atomic append (cache/scriptbench/reference_append.lua) and lua/append.lua itself,
// both run unpipelined by redis-benchmark at the same concurrency.
//
//	integration/testenv.sh go test -run '^$' -bench 'Append' -benchtime 5s ./integration/
//
// The event: a 200-byte model text reply that sets a session key, a user: key
// and a temp: key, with a new invocation every 5 events.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/scriptbench"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// appendBenchText is the text of every append benchmark event.
var appendBenchText = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]

// appendBenchContent is the content of every append benchmark event; events
// share it (the service never changes an event's JSON in place), so the
// harness spends little of the CPU the benchmarks measure.
var appendBenchContent = []byte(`{"role":"model","parts":[{"text":"` + appendBenchText + `"}]}`)

// appendBenchEvent is the i-th event an appender sends.
func appendBenchEvent(i int) *service.Event {
	return &service.Event{InvocationID: "inv-" + strconv.Itoa(i/5), Author: "agent", Content: appendBenchContent,
		Actions: service.EventActions{StateDelta: map[string]any{
			"counter": float64(i), "user:last": float64(i), "temp:step": float64(i % 5)}}}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// appendRun is what one measured run of appends gave.
type appendRun struct {
	rate      float64 // appends/s
	lat       []time.Duration
	cpuPer    float64 // µs of this process's CPU per append
	redisUsec float64 // µs of Redis's time per append (EVALSHA, INFO commandstats)
}

// runAppends appends n events spread over concurrency appenders, each with a
// session of its own, through append, and measures them.
func runAppends(b *testing.B, redisURL string, concurrency, n int, appendOne func(w, i int) error) appendRun {
	b.Helper()
	lat := make([][]time.Duration, concurrency)
	errs := make([]error, concurrency)
	calls0, usec0 := evalshaUsec(b, redisURL)
	cpu0 := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += concurrency {
				t0 := time.Now()
				errs[w] = appendOne(w, i/concurrency)
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	calls1, usec1 := evalshaUsec(b, redisURL)
	require.NoError(b, errors.Join(errs...))
	return appendRun{rate: float64(n) / elapsed.Seconds(), lat: slices.Concat(lat...),
		cpuPer: float64(cpu.Microseconds()) / float64(n), redisUsec: scriptbench.PerCall(calls0, usec0, calls1, usec1)}
}

// libraryAppender opens concurrency sessions in svc and returns the append
// of one event to the w-th.
func libraryAppender(b *testing.B, svc *service.Service, concurrency int) func(w, i int) error {
	b.Helper()
	ctx := context.Background()
	sessions := make([]*service.Session, concurrency)
	for w := range sessions {
		resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "bench", UserID: fmt.Sprintf("u%d", w)})
		require.NoError(b, err)
		sessions[w] = resp.Session
	}
	return func(w, i int) error { return svc.AppendEvent(ctx, sessions[w], appendBenchEvent(i)) }
}

// BenchmarkAppend measures AppendEvent at 1, 10 and 100 concurrent
// appenders, each with a session of its own (one agent runner per session,
// as a fleet runs), next to the references measured in the same run.
// Metrics: appends/s; p50/p99 latency; ref-calls/s and ratio-ref (appends/s
// ÷ the minimal atomic append's calls/s, target >= 0.6 at c=100);
// script-calls/s and ratio-script (÷ lua/append.lua's own calls/s);
// redis-µs/append and redis-ratio (÷ the minimal script's Redis time per
// call, target <= 2); go-cpu-µs/append (this process's CPU per append,
// target <= 25). ns/op is wall time per append.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) { benchAppend(b, c) })
	}
}

func benchAppend(b *testing.B, concurrency int) {
	ctx := context.Background()
	svc, redisURL, ns := openBench(b, false)
	defer svc.Close(ctx)
	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()

	// The references first, each on keys of its own.
	ref := measureScript(b, redisURL, concurrency, referenceCall(b, ns, appendBenchEvent(1)))
	ceilSess, err := svc.Create(ctx, &service.CreateRequest{AppName: "ceiling", UserID: "u"})
	require.NoError(b, err)
	script := measureScript(b, redisURL, concurrency, appendCall(b, rdb, ns, "ceiling", "u", ceilSess.Session.ID(), appendBenchEvent(1), false))

	appendOne := libraryAppender(b, svc, concurrency)
	b.ReportAllocs()
	var run appendRun
	for b.Loop() {
		run = runAppends(b, redisURL, concurrency, max(2000, int(ref.RPS)*2), appendOne)
	}
	b.ReportMetric(run.rate, "appends/s")
	b.ReportMetric(percentile(run.lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(run.lat, 0.99), "p99-µs")
	b.ReportMetric(ref.RPS, "ref-calls/s")
	b.ReportMetric(run.rate/ref.RPS, "ratio-ref")
	b.ReportMetric(script.RPS, "script-calls/s")
	b.ReportMetric(run.rate/script.RPS, "ratio-script")
	b.ReportMetric(run.redisUsec, "redis-µs/append")
	b.ReportMetric(ref.RedisUsec, "ref-redis-µs/call")
	b.ReportMetric(run.redisUsec/ref.RedisUsec, "redis-ratio")
	b.ReportMetric(run.cpuPer, "go-cpu-µs/append")
}

// BenchmarkHTTPAppend measures POST .../events at 10 concurrent clients
// over loopback HTTP (keep-alive), each to a session of its own, and, in the
// same run, the library at the same concurrency: ratio-library = HTTP
// appends/s ÷ library appends/s (target >= 0.5).
func BenchmarkHTTPAppend(b *testing.B) {
	const concurrency = 10
	ctx := context.Background()
	svc, redisURL, _ := openBench(b, false)
	defer svc.Close(ctx)
	srv := httptest.NewServer(httpapi.New(svc, httpapi.Options{}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	bodies := make([][]byte, 5)
	for i := range bodies {
		body, err := json.Marshal(appendBenchEvent(i))
		require.NoError(b, err)
		bodies[i] = body
	}
	urls := make([]string, concurrency)
	for w := range urls {
		resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "bench", UserID: fmt.Sprintf("h%d", w)})
		require.NoError(b, err)
		urls[w] = fmt.Sprintf("%s/apps/bench/users/h%d/sessions/%s/events", srv.URL, w, resp.Session.ID())
	}
	postOne := func(w, i int) error {
		req, err := http.NewRequest(http.MethodPost, urls[w], bytes.NewReader(bodies[i%5]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var sink bytes.Buffer
		_, _ = sink.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %s: %s", urls[w], resp.Status, sink.String())
		}
		return nil
	}
	libOne := libraryAppender(b, svc, concurrency)
	b.ReportAllocs()
	var lib, web appendRun
	for b.Loop() {
		lib = runAppends(b, redisURL, concurrency, 20000, libOne)
		web = runAppends(b, redisURL, concurrency, 20000, postOne)
	}
	b.ReportMetric(web.rate, "appends/s")
	b.ReportMetric(percentile(web.lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(web.lat, 0.99), "p99-µs")
	b.ReportMetric(lib.rate, "library-appends/s")
	b.ReportMetric(web.rate/lib.rate, "ratio-library")
	b.ReportMetric(web.cpuPer, "go-cpu-µs/append")
}
