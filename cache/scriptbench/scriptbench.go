// Package scriptbench holds adksession's benchmark helpers: it measures one
// Redis script the way the benchmarks' references are measured
// (redis-benchmark calling it with EVALSHA, unpipelined, at a given
// concurrency, against a standalone Redis, with Redis's own time per call
// read from INFO commandstats), and gives the scripts measured: the minimal
// atomic append (Reference) and append.lua made repeatable (AppendCeiling)
// with the arguments the service sends (AppendCommand). `adksession bench`
// and the integration benchmarks share it; no production package imports it
// (integration/imports_test.go checks). Internal to adksession: not a public
// API.
package scriptbench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
)

// Call is one script and the EVALSHA arguments redis-benchmark repeats
// (number of keys, keys, arguments), with Counted, a key each call adds one
// member or stream entry to: that proves every call took the path measured.
type Call struct {
	Src     string
	Args    []string
	Counted string
}

// referenceAppend is the minimal atomic append the benchmarks measure
// adksession against (see reference_append.lua); the service never runs it.
//
//go:embed reference_append.lua
var referenceAppend string

// Reference is reference_append.lua (the minimal atomic append) writing
// eventJSON, with a session key and a user key, to keys of its own under
// prefix (one hash slot).
func Reference(prefix string, eventJSON []byte) Call {
	tag := prefix + "{ref}:"
	return Call{Src: referenceAppend, Counted: tag + "e",
		Args: []string{"4", tag + "s", tag + "u", tag + "e", tag + "log", string(eventJSON), "1", "1"}}
}

// Result is what redis-benchmark measured of one script.
type Result struct {
	RPS       float64 // EVALSHA calls per second
	P50, P99  float64 // latency of one call, µs
	RedisUsec float64 // Redis's own time per EVALSHA call, µs (INFO commandstats)
}

// Run calls call n times from concurrency redis-benchmark clients (bin)
// against the standalone Redis at redisURL and checks that each call added
// one member to call.Counted.
func Run(ctx context.Context, bin, redisURL string, concurrency, n int, call Call) (Result, error) {
	u, err := url.Parse(redisURL)
	if err != nil || u.Scheme != "redis" {
		return Result{}, errors.New("scripts are measured on a standalone redis:// URL only")
	}
	rdb, err := cache.NewClient(redisURL)
	if err != nil {
		return Result{}, err
	}
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, call.Src).Result()
	if err != nil {
		return Result{}, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	argv := []string{"-h", u.Hostname(), "-p", u.Port(), "-c", strconv.Itoa(concurrency), "-n", strconv.Itoa(n), "-P", "1", "--csv"}
	if pw, ok := u.User.Password(); ok {
		argv = append(argv, "-a", pw)
		if name := u.User.Username(); name != "" {
			argv = append(argv, "--user", name)
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		argv = append(argv, "--dbnum", db)
	}
	before, err := size(ctx, rdb, call.Counted)
	if err != nil {
		return Result{}, err
	}
	calls0, usec0, err := EvalshaStats(ctx, rdb)
	if err != nil {
		return Result{}, err
	}
	out, err := exec.CommandContext(ctx, bin, append(append(argv, "EVALSHA", sha), call.Args...)...).CombinedOutput()
	if err != nil {
		return Result{}, fmt.Errorf("redis-benchmark: %v: %s", err, tail(string(out), 300))
	}
	calls1, usec1, err := EvalshaStats(ctx, rdb)
	if err != nil {
		return Result{}, err
	}
	r, err := ParseCSV(string(out))
	if err != nil {
		return Result{}, err
	}
	after, err := size(ctx, rdb, call.Counted)
	if err != nil {
		return Result{}, err
	}
	if after-before != int64(n) {
		return Result{}, fmt.Errorf("%d of %d calls did not take the measured path (%s grew by %d)", int64(n)-(after-before), n, call.Counted, after-before)
	}
	r.RedisUsec = PerCall(calls0, usec0, calls1, usec1)
	return r, nil
}

// Measure is Run sized to last about seconds: a calibration run of at
// least 2000 calls, then the measured one.
func Measure(ctx context.Context, bin, redisURL string, concurrency int, seconds float64, call Call) (Result, error) {
	calib := max(2000, 20*concurrency)
	r, err := Run(ctx, bin, redisURL, concurrency, calib, call)
	if err != nil {
		return r, err
	}
	return Run(ctx, bin, redisURL, concurrency, max(calib, int(r.RPS*seconds)), call)
}

// size is the number of members or entries of key.
func size(ctx context.Context, rdb redis.UniversalClient, key string) (int64, error) {
	t, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	if t == "stream" {
		return rdb.XLen(ctx, key).Result()
	}
	return rdb.ZCard(ctx, key).Result()
}

// csvRow is the data row of `redis-benchmark --csv`: the test title (the
// command, whose JSON is not CSV-escaped), then rps, avg, min, p50, p95,
// p99, max latency in ms.
var csvRow = regexp.MustCompile(`"([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)","([0-9.]+)"\s*$`)

// ParseCSV reads calls/s and the p50 and p99 latency of `redis-benchmark
// --csv` output.
func ParseCSV(out string) (Result, error) {
	m := csvRow.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return Result{}, fmt.Errorf("redis-benchmark --csv: no data row in %q", tail(out, 300))
	}
	f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
	return Result{RPS: f(1), P50: f(4) * 1000, P99: f(6) * 1000}, nil
}

var evalshaStats = regexp.MustCompile(`cmdstat_evalsha:calls=([0-9]+),usec=([0-9]+)`)

// EvalshaStats reads Redis's total count and CPU time (µs) of EVALSHA
// calls from INFO commandstats (0, 0 before the first); the difference of
// two readings is the server's own time, network and client excluded.
func EvalshaStats(ctx context.Context, rdb redis.UniversalClient) (calls, usec int64, err error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	m := evalshaStats.FindStringSubmatch(info)
	if m == nil {
		return 0, 0, nil
	}
	calls, _ = strconv.ParseInt(m[1], 10, 64)
	usec, _ = strconv.ParseInt(m[2], 10, 64)
	return calls, usec, nil
}

// PerCall is the µs per EVALSHA call between two EvalshaStats readings (0
// when there was none).
func PerCall(calls0, usec0, calls1, usec1 int64) float64 {
	if calls1 <= calls0 {
		return 0
	}
	return float64(usec1-usec0) / float64(calls1-calls0)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
