package integration

// The references appends are measured against, in the same run as
// BenchmarkAppend: redis-benchmark calling, with EVALSHA, the minimal atomic
// append (cache/scriptbench/reference_append.lua: HSET session, HSET user, XADD
// events, XADD log) and lua/append.lua itself (scriptbench.AppendCeiling: the handle's revision is
// not compared and the event id is made unique per call, so that fixed
// arguments take the library's common path every time, with the very same
// Redis commands). cache/scriptbench runs them (`adksession bench` too).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/scriptbench"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// ceilingSeconds is how long each measured redis-benchmark run lasts, roughly.
const ceilingSeconds = 3

// referenceCall is scriptbench's reference_append.lua writing ev's JSON, with a
// session key and a user key, to keys of its own in namespace ns.
func referenceCall(b *testing.B, ns string, ev *service.Event) scriptbench.Call {
	b.Helper()
	blob, err := ev.MarshalJSON()
	require.NoError(b, err)
	return scriptbench.Reference(ns, blob)
}

// appendCall is lua/append.lua as the service calls it for ev (with the
// handle's revision not compared and the event id made unique per call:
// scriptbench.AppendCeiling), appending to session (app, user, sid) of namespace ns.
func appendCall(b *testing.B, rdb redis.UniversalClient, ns, app, user, sid string, ev *service.Event, durable bool) scriptbench.Call {
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
	// TempTTL: the service's default, as the benchmarks open it.
	args, err := scriptbench.AppendCommand(cache.Options{Keys: keys, Durable: durable, TempTTL: time.Hour}, cache.AppendArgs{
		SessionRef: base.SessionRef{App: app, User: user, ID: sid}, Incarnation: inc,
		Ts: stored.Timestamp.UnixMicro(), InvocationID: stored.InvocationID, EventID: stored.ID,
		EventPre: pre, EventPost: post, Delta: delta})
	require.NoError(b, err)
	return scriptbench.Call{Src: scriptbench.AppendCeiling(), Counted: k.Events, Args: args}
}

// measureScript measures call with redis-benchmark at concurrency clients
// (-P 1, no pipelining) against the standalone Redis at redisURL, for about
// ceilingSeconds.
func measureScript(b *testing.B, redisURL string, concurrency int, call scriptbench.Call) scriptbench.Result {
	b.Helper()
	r, err := scriptbench.Measure(context.Background(), testenv.RedisBenchmarkPath(b), redisURL, concurrency, ceilingSeconds, call)
	require.NoError(b, err)
	return r
}

// evalshaUsec reads Redis's total count and CPU time (µs) of EVALSHA calls.
func evalshaUsec(b *testing.B, redisURL string) (calls, usec int64) {
	b.Helper()
	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()
	calls, usec, err = scriptbench.EvalshaStats(context.Background(), rdb)
	require.NoError(b, err)
	return calls, usec
}

func TestParseBenchmarkCSV(t *testing.T) {
	t.Parallel()
	out := "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n" +
		"\"EVALSHA abc 7 k {\"id\":\"x\",\"a\":\"b\"} 0\",\"41152.26\",\"0.233\",\"0.072\",\"0.215\",\"0.351\",\"0.503\",\"3.271\"\n"
	c, err := scriptbench.ParseCSV(out)
	require.NoError(t, err)
	require.InDelta(t, 41152.26, c.RPS, 1e-6)
	require.InDelta(t, 215, c.P50, 1e-6)
	require.InDelta(t, 503, c.P99, 1e-6)
	_, err = scriptbench.ParseCSV("Could not connect to Redis at 127.0.0.1:1: Connection refused\n")
	require.Error(t, err)
}
