package integration_test

// The physical ceiling of appends, measured in the same run as BenchmarkAppend:
// redis-benchmark calling lua/append.lua itself with EVALSHA. Only the handle's
// revision is taken from the session instead of ARGV (fixed arguments cannot
// follow it), so every call takes the common path of the library's appends and
// runs the very same Redis commands: meta and count checks, undo record, session
// state, event log, user index.

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
	"github.com/adksession/adksession/service"
)

// ceilingSeconds is how long each measured redis-benchmark run lasts, roughly.
const ceilingSeconds = 3

// ceiling is what redis-benchmark measured.
type ceiling struct {
	RPS      float64 // EVALSHA calls per second
	P50, P99 float64 // latency of one call, µs
}

// ceilingScript is lua/append.lua with the handle's revision read from the
// session (lua.AppendCeiling).
func ceilingScript(b *testing.B) string {
	b.Helper()
	return lua.AppendCeiling()
}

// measureCeiling runs redis-benchmark with EVALSHA of the ceiling script at
// concurrency clients (-P 1, no pipelining), each call appending ev (stored
// JSON, with one session state key "counter") to one session of svc's
// namespace ns. A calibration run sizes -n for about ceilingSeconds.
func measureCeiling(b *testing.B, svc *service.Service, redisURL, ns string, concurrency int, ev *service.Event) ceiling {
	b.Helper()
	ctx := context.Background()
	bin := testenv.RedisBenchmarkPath(b)
	u, err := url.Parse(redisURL)
	require.NoError(b, err)
	require.Equal(b, "redis", u.Scheme, "the ceiling is measured on standalone Redis")

	app, user, sid := "ceiling", "u", uuid.NewString()
	_, err = svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid})
	require.NoError(b, err)
	defer svc.Delete(ctx, &service.DeleteRequest{AppName: app, UserID: user, SessionID: sid})

	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, ceilingScript(b)).Result()
	require.NoError(b, err)

	stored := ev.Clone()
	stored.ID = uuid.NewString()
	stored.Timestamp = time.Now().Truncate(time.Microsecond).UTC()
	blob, err := stored.MarshalJSON()
	require.NoError(b, err)
	keys, err := cache.NewKeys(ns, 0)
	require.NoError(b, err)
	k := keys.Session(app, user, sid)
	inc, err := rdb.HGet(ctx, k.Session, "m:inc").Int64()
	require.NoError(b, err)
	// KEYS and ARGV as cache.Store.Append passes them.
	pre, post, err := cache.SplitTimestamp(blob)
	require.NoError(b, err)
	store := cache.NewStore(rdb, cache.Options{Keys: keys})
	call := store.AppendCommand(cache.AppendArgs{App: app, User: user, SID: sid, Incarnation: inc,
		Ts: stored.Timestamp.UnixMicro(), InvocationID: stored.InvocationID, EventID: stored.ID,
		EventPre: pre, EventPost: post, Delta: cache.StateDelta{Session: []cache.Pair{{Key: "counter", Value: "1"}}}})
	cmd := append([]string{"EVALSHA", sha}, call...)
	nkeys, err := strconv.Atoi(call[0])
	require.NoError(b, err)

	// One call by hand: the script must take the common path ({0, seq, ts}).
	args := make([]any, 0, len(call))
	for _, a := range call[1+nkeys:] {
		args = append(args, a)
	}
	res, err := rdb.EvalSha(ctx, sha, call[1:1+nkeys], args...).Int64Slice()
	require.NoError(b, err)
	require.Equal(b, []int64{0, 1}, res[:2], "ceiling script did not append")

	run := func(n int) ceiling {
		argv := []string{"-h", u.Hostname(), "-p", u.Port(), "-c", strconv.Itoa(concurrency), "-n", strconv.Itoa(n),
			"-P", "1", "--csv"}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" {
			argv = append(argv, "--dbnum", db)
		}
		out, err := exec.CommandContext(ctx, bin, append(argv, cmd...)...).CombinedOutput()
		require.NoError(b, err, "redis-benchmark: %s", out)
		c, err := parseBenchmarkCSV(string(out))
		require.NoError(b, err)
		return c
	}
	calib := max(2000, 20*concurrency)
	c := run(calib)
	n := max(calib, int(c.RPS*ceilingSeconds))
	c = run(n)

	// Every call appended one event: redis-benchmark counts error replies as requests.
	cnt, err := rdb.ZCard(ctx, k.Events).Result()
	require.NoError(b, err)
	require.EqualValues(b, 1+calib+n, cnt, "ceiling script calls that did not append")
	return c
}

// benchmarkCSVRow is the data row of `redis-benchmark --csv`: the test title
// (the command, whose JSON is not CSV-escaped), then rps, avg, min, p50, p95,
// p99, max latency in ms.
var benchmarkCSVRow = regexp.MustCompile(`"([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)"\s*$`)

func parseBenchmarkCSV(out string) (ceiling, error) {
	m := benchmarkCSVRow.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return ceiling{}, fmt.Errorf("redis-benchmark --csv: no data row in %q", tail(out, 300))
	}
	f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
	return ceiling{RPS: f(1), P50: f(4) * 1000, P99: f(6) * 1000}, nil
}

var evalshaStats = regexp.MustCompile(`cmdstat_evalsha:calls=([0-9]+),usec=([0-9]+)`)

// evalshaUsec reads Redis's total count and CPU time (µs) of EVALSHA calls
// from INFO commandstats; the difference of two readings is the server's own
// time per script call, network and client excluded.
func evalshaUsec(b *testing.B, redisURL string) (calls, usec int64) {
	b.Helper()
	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err)
	m := evalshaStats.FindStringSubmatch(info)
	if m == nil {
		return 0, 0
	}
	calls, _ = strconv.ParseInt(m[1], 10, 64)
	usec, _ = strconv.ParseInt(m[2], 10, 64)
	return calls, usec
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func TestParseBenchmarkCSV(t *testing.T) {
	t.Parallel()
	out := "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n" +
		"\"EVALSHA abc 7 k {\"id\":\"x\",\"a\":\"b\"} 0\",\"41152.26\",\"0.233\",\"0.072\",\"0.215\",\"0.351\",\"0.503\",\"3.271\"\n"
	c, err := parseBenchmarkCSV(out)
	require.NoError(t, err)
	require.InDelta(t, 41152.26, c.RPS, 1e-6)
	require.InDelta(t, 215, c.P50, 1e-6)
	require.InDelta(t, 503, c.P99, 1e-6)
	_, err = parseBenchmarkCSV("Could not connect to Redis at 127.0.0.1:1: Connection refused\n")
	require.Error(t, err)
}
