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
		n, err := got.Session.State().Get("counter")
		require.NoError(t, err)
		require.Equal(t, float64(4), n)
	}
}

// TestBenchAgainstRedis runs `adksession bench` on real Redis, with the
// redis-benchmark EVALSHA ceiling.
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
	require.Regexp(t, `redis bytes\s+\d+ per cached event`, report)
	m := regexp.MustCompile(`ceiling\s+redis-benchmark EVALSHA (\d+)/s at c=4: appends at (\d+)% of the ceiling`).FindStringSubmatch(report)
	require.NotNil(t, m, report)
	rps, _ := strconv.Atoi(m[1])
	require.Positive(t, rps)
	require.Contains(t, errs.String(), "200/200")
	t.Log(report)
}
