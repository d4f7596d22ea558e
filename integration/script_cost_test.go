package integration

// The Redis cost of one append, counted in instructions rather than timed:
// redis-server runs under valgrind's callgrind, which counts the
// instructions it executes, whatever else the machine is doing. Each script
// is called the same number of times by redis-benchmark and the count per
// call is reported next to the minimal atomic append's, along with the cost
// of each part of append.lua (the script cut short after each part), and
// create.lua's, rewind.lua's and delete.lua's; each also as the
// instructions inside EVALSHA alone (-inscript), which do not move with
// the machine's load.
//
//	integration/testenv.sh go test -run '^$' -bench ScriptInstructions -benchtime 1x ./integration/
//
// It needs valgrind (skipped without it).

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/scriptbench"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// scriptCostCalls is how many times each script is called under callgrind.
const scriptCostCalls = 3000

// BenchmarkScriptInstructions reports redis-server instructions per call of
// the minimal atomic append (ref-instr/call), of append.lua as the
// benchmarks call it (durable: with a database; instr/call), their ratio,
// and, for append.lua cut short after each of its parts, the instructions
// up to there (part-…).
func BenchmarkScriptInstructions(b *testing.B) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skip("valgrind not installed")
	}
	ctx := context.Background()
	dir := testenv.TempDir(b)
	port := 20000 + os.Getpid()%10000
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command(valgrind, "--tool=callgrind", "--callgrind-out-file="+out, testenv.RedisServerPath(b),
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	require.NoError(b, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	redisURL := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	rdb, err := cache.NewClient(redisURL)
	require.NoError(b, err)
	defer rdb.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for rdb.Ping(ctx).Err() != nil {
		require.True(b, time.Now().Before(deadline), "redis-server under valgrind did not start")
		time.Sleep(100 * time.Millisecond) // polling a starting server
	}
	svc, err := service.Open(ctx, service.Config{RedisURL: redisURL})
	require.NoError(b, err)
	defer svc.Close(ctx)
	resp, err := svc.Create(ctx, &service.CreateRequest{AppName: "cost", UserID: "u"})
	require.NoError(b, err)

	// instructions runs call n times and returns the instructions per call,
	// from a callgrind dump taken before and after.
	dumps := 0
	// inScript is the instructions inside EVALSHA (evalShaCommand, with what
	// it calls) of the last dump: the script's own work, without the
	// request's parsing and the event loop's, which vary with the machine's
	// load (cron and expire cycles run by the clock).
	var inScript int64
	total := func() int64 {
		dumps++
		out, err := exec.Command("callgrind_control", "-d", strconv.Itoa(cmd.Process.Pid)).CombinedOutput()
		require.NoError(b, err, "%s", out)
		var n int64
		n, inScript = callgrindTotal(b, out, dir)
		return n
	}
	instructions := func(call scriptbench.Call) float64 {
		u, _ := url.Parse(redisURL)
		sha, err := rdb.ScriptLoad(ctx, call.Src).Result()
		require.NoError(b, err)
		total()
		argv := append([]string{"-h", u.Hostname(), "-p", u.Port(), "-c", "1", "-n", strconv.Itoa(scriptCostCalls), "-P", "1", "-q",
			"EVALSHA", sha}, call.Args...)
		res, err := exec.Command(testenv.RedisBenchmarkPath(b), argv...).CombinedOutput()
		require.NoError(b, err, "%s", res)
		return float64(total()) / scriptCostCalls
	}
	// inScriptOf is what inScript was for the last measurement, per call.
	inScriptOf := func(calls int) float64 {
		require.Positive(b, inScript, "no evalShaCommand in the callgrind dump")
		return float64(inScript) / float64(calls)
	}
	// goCalls runs call(i) for i in [0, n) from this process, one at a time,
	// and returns the instructions per call.
	goCalls := func(n int, call func(i int)) float64 {
		total()
		for i := range n {
			call(i)
		}
		return float64(total()) / float64(n)
	}
	for b.Loop() {
		ins := map[string]float64{}
		for name, v := range otherScripts(b, rdb, goCalls, func(name string) { ins[name] = inScriptOf(otherScriptCalls) }) {
			b.ReportMetric(v, name+"-instr/call")
		}
		for name, v := range ins {
			b.ReportMetric(v, name+"-inscript/call")
		}
		ref := instructions(referenceCall(b, "", appendBenchEvent(1)))
		b.ReportMetric(inScriptOf(scriptCostCalls), "ref-inscript/call")
		full := appendCall(b, rdb, "", "cost", "u", resp.Session.ID(), appendBenchEvent(1), true)
		b.ReportMetric(ref, "ref-instr/call")
		app := instructions(full)
		b.ReportMetric(app, "instr/call")
		b.ReportMetric(inScriptOf(scriptCostCalls), "inscript/call")
		b.ReportMetric(app/ref, "ratio")
		for i, part := range appendParts {
			require.Equal(b, 1, strings.Count(full.Src, part.before), "append.lua must have %q once", part.before)
			at := strings.Index(full.Src, part.before)
			cut := full
			cut.Src = full.Src[:at] + "\nif true then return {0} end\n" + full.Src[at:]
			b.ReportMetric(instructions(cut), fmt.Sprintf("part%d-%s-instr", i+1, part.name))
		}
	}
}

// otherScriptCalls is how many times each of the other session scripts is
// called (from Go, on sessions of their own).
const otherScriptCalls = 500

// otherScripts measures, with a database (durable), create.lua (a session
// with one session key), rewind.lua (before the one invocation of a session
// with one event that set a session key: the undo records' path) and
// delete.lua, each on sessions of its own.
func otherScripts(b *testing.B, rdb redis.UniversalClient, measure func(n int, call func(i int)) float64, measured func(name string)) map[string]float64 {
	ctx := context.Background()
	keys, err := cache.NewKeys("other:", 0)
	require.NoError(b, err)
	store := cache.NewStore(rdb, cache.Options{Keys: keys, Durable: true})
	require.NoError(b, store.LoadScripts(ctx))
	k := keys.Session("cost", "u", "")
	require.NoError(b, rdb.HSet(ctx, k.User, "m:rev", 0).Err())
	require.NoError(b, rdb.ZAdd(ctx, k.UserIndex, redis.Z{Member: ""}).Err())
	sid := func(i int) string { return "s" + strconv.Itoa(i) }
	now := time.Now().UnixMicro()
	out := map[string]float64{}
	out["create"] = measure(otherScriptCalls, func(i int) {
		require.NoError(b, store.Create(ctx, cache.CreateArgs{SessionRef: base.SessionRef{App: "cost", User: "u", ID: sid(i)}, CreateTime: now + int64(i), Token: sid(i),
			Delta: cache.StateDelta{Session: []cache.Pair{{Key: "a", Value: "1"}}}}))
	})
	measured("create")
	for i := range otherScriptCalls {
		_, err := store.Append(ctx, cache.AppendArgs{SessionRef: base.SessionRef{App: "cost", User: "u", ID: sid(i)}, HandleRev: 0, Incarnation: now + int64(i),
			Ts: now + 1000, InvocationID: "inv", EventID: "e" + sid(i), EventPre: `{"id":"e","timestamp":`, EventPost: `}`,
			Delta: cache.StateDelta{Session: []cache.Pair{{Key: "a", Value: "2"}}}})
		require.NoError(b, err)
	}
	out["rewind"] = measure(otherScriptCalls, func(i int) {
		r, err := store.Rewind(ctx, cache.RewindArgs{SessionRef: base.SessionRef{App: "cost", User: "u", ID: sid(i)}, Before: "inv", InvocationID: "e-r",
			EventID: "r" + sid(i), Ts: now + 2000, EventPre: `{"id":"r","timestamp":`, EventMid: `,"actions":{"stateDelta":`, EventTail: `}}`})
		require.NoError(b, err)
		require.EqualValues(b, 2, r.Seq)
	})
	measured("rewind")
	out["delete"] = measure(otherScriptCalls, func(i int) {
		ok, err := store.Delete(ctx, base.SessionRef{App: "cost", User: "u", ID: sid(i)})
		require.NoError(b, err)
		require.True(b, ok)
	})
	measured("delete")
	return out
}

// appendParts are the places append.lua is cut short at, in order.
var appendParts = []struct{ name, before string }{
	{"call", "-- lib.lua:"},
	{"lib", "local sess, events, temp, user, uindex, log = KEYS[1]"},
	{"inputs", "-- Preconditions, all checked"},
	{"checks", "-- Session state (and m:sz"},
	{"event", "-- What rewind.lua needs"},
	{"undo", "if u > 0 then\n  uvals[#uvals + 1]"},
	{"user-temp", "if durable then\n  -- The user index"},
}

// callgrindTotal reads the instruction total of the dump callgrind_control
// just wrote (the newest callgrind.out.* file of dir), and the instructions
// inside evalShaCommand (inclusive, by callgrind_annotate).
func callgrindTotal(b *testing.B, ctlOut []byte, dir string) (total, inScript int64) {
	b.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "callgrind.out*"))
	require.NoError(b, err)
	var newest string
	var at time.Time
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(at) {
			newest, at = f, st.ModTime()
		}
	}
	require.NotEmpty(b, newest, "no callgrind dump (%s)", ctlOut)
	fh, err := os.Open(newest)
	require.NoError(b, err)
	defer fh.Close()
	ann, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", newest).CombinedOutput()
	require.NoError(b, err, "%s", ann)
	for _, line := range strings.Split(string(ann), "\n") {
		if strings.Contains(line, ":evalShaCommand ") || strings.HasSuffix(line, ":evalShaCommand") {
			f := strings.Fields(line)
			inScript, _ = strconv.ParseInt(strings.ReplaceAll(f[0], ",", ""), 10, 64)
		}
	}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			require.NoError(b, err)
			if keep := os.Getenv("ADKSESSION_KEEP_CALLGRIND"); keep != "" {
				require.NoError(b, os.Rename(newest, filepath.Join(keep, fmt.Sprintf("callgrind.%d", n))))
			} else {
				require.NoError(b, os.Remove(newest))
			}
			return n, inScript
		}
	}
	b.Fatalf("no summary line in %s", newest)
	return 0, 0
}
