package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestLoadgenLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, err := service.Open(ctx, service.Config{RedisURL: "redis://" + miniredis.RunT(t).Addr() + "/0"})
	require.NoError(t, err)
	defer svc.Close(ctx)
	var calls, last atomic.Int64
	res, err := loadgen.Run(ctx, loadgen.Library{Svc: svc}, loadgen.Config{Sessions: 4, Events: 5, Concurrency: 3, PayloadBytes: 64,
		Progress: func(n int64) {
			calls.Add(1)
			for old := last.Load(); n > old && !last.CompareAndSwap(old, n); old = last.Load() {
			}
		}})
	require.NoError(t, err)
	require.Equal(t, int64(20), res.Appends)
	require.Equal(t, int64(20), last.Load())
	require.Equal(t, int64(20), calls.Load())
	require.Equal(t, 5, res.FullEvents)
	require.Positive(t, res.AppendsPerSec)
	require.LessOrEqual(t, res.AppendP50, res.AppendP99)
	for _, ref := range res.SessionIDs {
		got, err := svc.Get(ctx, &service.GetRequest{AppName: ref.App, UserID: ref.User, SessionID: ref.ID})
		require.NoError(t, err)
		require.Equal(t, 5, got.Session.Events().Len())
		for _, key := range []string{"counter", "user:last"} { // the last event's delta
			n, err := got.Session.State().Get(key)
			require.NoError(t, err, key)
			require.Equal(t, float64(4), n, key)
		}
	}
}

// TestBenchAgainstRedis runs `adksession bench` on real Redis, with the
// redis-benchmark EVALSHA references: the report gives the minimal script's
// and append.lua's calls/s and Redis time, and the three ratios.
func TestBenchAgainstRedis(t *testing.T) {
	url := testenv.RedisURL(t)
	testenv.RedisBenchmarkPath(t)
	t.Parallel()
	var out, errs bytes.Buffer
	ns := testenv.UniqueName(t, "bench-")
	require.NoError(t, runBench(context.Background(), []string{"--redis", url, "--namespace", ns,
		"--sessions", "10", "--events", "20", "--concurrency", "4", "--payload", "200"}, &out, &errs), errs.String())
	report := out.String()
	require.Regexp(t, `appends\s+200 in `, report)
	require.Regexp(t, `get window\s+10 newest`, report)
	require.Regexp(t, `get full\s+20 events`, report)
	require.Regexp(t, `redis bytes\s+\d+ per cached event \(event JSON \d+ B: ×[0-9.]+\); with its id and undo record \d+ \(×[0-9.]+\)`, report)
	// Each reference and ratio is on its own line, with a positive number.
	for _, line := range []string{
		`redis time\s+([0-9.]+)µs of scripts per append \(INFO commandstats EVALSHA µs ÷ appends\)`,
		`minimal\s+reference_append.lua, redis-benchmark EVALSHA at c=4: ([0-9.]+)/s, Redis ([0-9.]+)µs per call`,
		`append.lua\s+alone, redis-benchmark EVALSHA at c=4: ([0-9.]+)/s, Redis ([0-9.]+)µs per call`,
		`ratio-ref\s+([0-9.]+) \(appends/s ÷ the minimal script's calls/s\)`,
		`ratio-script\s+([0-9.]+) \(appends/s ÷ append.lua's calls/s\)`,
		`redis-ratio\s+([0-9.]+) \(Redis µs per append ÷ the minimal script's per call\)`,
	} {
		m := regexp.MustCompile(`(?m)^` + line + `$`).FindStringSubmatch(report)
		require.NotNil(t, m, "no line %q in\n%s", line, report)
		for _, v := range m[1:] {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			require.Positive(t, f, "%s in\n%s", line, report)
		}
	}
	require.Contains(t, errs.String(), "200/200")
	t.Log(report)
}

// TestBenchReadRatios: with a Postgres database, `adksession bench` reports
// a full Get against its raw fetch and a cold Get against the raw rows,
// each with its two medians and their ratio.
func TestBenchReadRatios(t *testing.T) {
	url, dbURL := testenv.RedisURL(t), testenv.FreshDatabase(t)
	t.Parallel()
	var out, errs bytes.Buffer
	ns := testenv.UniqueName(t, "bench-")
	require.NoError(t, runBench(context.Background(), []string{"--redis", url, "--database", dbURL, "--namespace", ns, "--no-ceiling",
		"--sessions", "4", "--events", "30", "--concurrency", "2", "--payload", "200"}, &out, &errs), errs.String())
	report := out.String()
	for _, line := range []string{
		`get vs fetch\s+full Get of 30 events p50 ([0-9.]+)ms, ZRANGE \+ json.Valid ([0-9.]+)ms: ×([0-9.]+)`,
		`cold vs rows\s+cold Get p50 ([0-9.]+)ms, the same rows from Postgres raw ([0-9.]+)ms: ×([0-9.]+)`,
	} {
		m := regexp.MustCompile(`(?m)^` + line + `$`).FindStringSubmatch(report)
		require.NotNil(t, m, "no line %q in\n%s", line, report)
		for _, v := range m[1:] {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			require.Positive(t, f, "%s in\n%s", line, report)
		}
	}
	t.Log(report)
}
