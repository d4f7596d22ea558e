package integration

// The references appends are measured against, in the same run as
// BenchmarkAppend: redis-benchmark calling, with EVALSHA, the minimal atomic
// append (lua/reference_append.lua: HSET session, HSET user, XADD events, XADD
// log) and lua/append.lua itself (lua.AppendCeiling: the handle's revision is
// not compared and the event id is made unique per call, so that fixed
// arguments take the library's common path every time, with the very same
// Redis commands).

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
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
	"github.com/adksession/adksession/service"
)

// ceilingSeconds is how long each measured redis-benchmark run lasts, roughly.
const ceilingSeconds = 3

// ceiling is what redis-benchmark measured of one script.
type ceiling struct {
	RPS       float64 // EVALSHA calls per second
	P50, P99  float64 // latency of one call, µs
	RedisUsec float64 // Redis's own time per call, µs (INFO commandstats)
}

// scriptCall is one script and the EVALSHA arguments redis-benchmark repeats
// (number of keys, keys, arguments), with a key each call adds one member or
// entry to, which proves that every call took the path measured.
type scriptCall struct {
	src     string
	args    []string
	counted string
}

// referenceCall is lua/reference_append.lua writing ev's JSON, with a
// session key and a user key, to keys of its own in namespace ns.
func referenceCall(b *testing.B, ns string, ev *service.Event) scriptCall {
	b.Helper()
	blob, err := ev.MarshalJSON()
	require.NoError(b, err)
	tag := ns + "{ref}:"
	return scriptCall{src: lua.ReferenceAppend, counted: tag + "e",
		args: []string{"4", tag + "s", tag + "u", tag + "e", tag + "log", string(blob), "1", "1"}}
}

// appendCall is lua/append.lua as the service calls it for ev (with the
// handle's revision not compared and the event id made unique per call:
// lua.AppendCeiling), appending to session (app, user, sid) of namespace ns.
func appendCall(b *testing.B, rdb redis.UniversalClient, ns, app, user, sid string, ev *service.Event, durable bool) scriptCall {
	b.Helper()
	ctx := context.Background()
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
	pre, post, err := cache.SplitTimestamp(blob)
	require.NoError(b, err)
	var delta cache.StateDelta
	for key, v := range stored.Actions.StateDelta {
		p := cache.Pair{Key: key, Value: fmt.Sprint(v)}
		switch {
		case strings.HasPrefix(key, service.UserPrefix):
			p.Key = key[len(service.UserPrefix):]
			delta.User = append(delta.User, p)
		case strings.HasPrefix(key, service.TempPrefix):
			delta.Temp = append(delta.Temp, p)
		default:
			delta.Session = append(delta.Session, p)
		}
	}
	store := cache.NewStore(rdb, cache.Options{Keys: keys, Durable: durable})
	return scriptCall{src: lua.AppendCeiling(), counted: k.Events, args: store.AppendCommand(cache.AppendArgs{
		App: app, User: user, SID: sid, Incarnation: inc,
		Ts: stored.Timestamp.UnixMicro(), InvocationID: stored.InvocationID, EventID: stored.ID,
		EventPre: pre, EventPost: post, Delta: delta})}
}

// measureScript runs redis-benchmark with EVALSHA of call at concurrency
// clients (-P 1, no pipelining) against the standalone Redis at redisURL. A
// calibration run sizes -n for about ceilingSeconds; the call is checked to
// take the measured path every time (redis-benchmark counts error replies as
// requests).
func measureScript(b *testing.B, redisURL string, concurrency int, call scriptCall) ceiling {
	b.Helper()
	ctx := context.Background()
	bin := testenv.RedisBenchmarkPath(b)
	u, err := url.Parse(redisURL)
	require.NoError(b, err)
	require.Equal(b, "redis", u.Scheme, "scripts are measured on standalone Redis")
	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, call.src).Result()
	require.NoError(b, err)
	size := func() int64 {
		if t, _ := rdb.Type(ctx, call.counted).Result(); t == "stream" {
			return rdb.XLen(ctx, call.counted).Val()
		}
		return rdb.ZCard(ctx, call.counted).Val()
	}
	run := func(n int) ceiling {
		argv := []string{"-h", u.Hostname(), "-p", u.Port(), "-c", strconv.Itoa(concurrency), "-n", strconv.Itoa(n),
			"-P", "1", "--csv"}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" {
			argv = append(argv, "--dbnum", db)
		}
		before := size()
		calls0, usec0 := evalshaUsec(b, redisURL)
		out, err := exec.CommandContext(ctx, bin, append(append(argv, "EVALSHA", sha), call.args...)...).CombinedOutput()
		require.NoError(b, err, "redis-benchmark: %s", out)
		calls1, usec1 := evalshaUsec(b, redisURL)
		c, err := parseBenchmarkCSV(string(out))
		require.NoError(b, err)
		require.EqualValues(b, n, size()-before, "calls of %s that did not take the measured path", call.counted)
		if calls1 > calls0 {
			c.RedisUsec = float64(usec1-usec0) / float64(calls1-calls0)
		}
		return c
	}
	calib := max(2000, 20*concurrency)
	c := run(calib)
	return run(max(calib, int(c.RPS*ceilingSeconds)))
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
