package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/lua"
)

// ceilingNamespace keeps the ceiling's keys apart from every deployment's.
const ceilingNamespace = "adksession-bench-ceiling:"

// evalshaCeiling runs redis-benchmark with EVALSHA of lua/append.lua itself
// (lua.AppendCeiling: the same Redis work as one append, each call appending
// to one session) at the run's concurrency and number of appends, and
// returns its requests/s. durable adds the change-log work append.lua does
// with a database.
// Only a standalone Redis (redis:// URL) is measured.
func evalshaCeiling(ctx context.Context, redisURL string, cfg loadgen.Config, durable bool) (float64, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return 0, errors.New("redis-benchmark not installed")
	}
	u, err := url.Parse(redisURL)
	if err != nil || (u.Scheme != "redis") {
		return 0, errors.New("ceiling measured on a standalone redis:// URL only")
	}
	rdb, err := cache.NewClient(redisURL)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, lua.AppendCeiling()).Result()
	if err != nil {
		return 0, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	keys, err := cache.NewKeys(ceilingNamespace, 0)
	if err != nil {
		return 0, err
	}
	const app, user, sid = "bench", "u", "ceiling"
	store := cache.NewStore(rdb, cache.Options{Keys: keys})
	if err := store.Create(ctx, cache.CreateArgs{App: app, User: user, SID: sid, CreateTime: time.Now().UnixMicro()}); err != nil && !errors.Is(err, cache.ErrExists) {
		return 0, fmt.Errorf("ceiling session: %w", err)
	}
	inc, err := rdb.HGet(ctx, keys.Session(app, user, sid).Session, "m:inc").Int64()
	if err != nil {
		return 0, fmt.Errorf("ceiling session: %w", err)
	}
	ev, err := loadgen.Event(0, cfg.PayloadBytes).MarshalJSON()
	if err != nil {
		return 0, err
	}
	pre, post, err := cache.SplitTimestamp(ev)
	if err != nil {
		return 0, err
	}
	args := []string{"-h", u.Hostname(), "-p", u.Port(), "-n", strconv.Itoa(cfg.Sessions * cfg.Events), "-c", strconv.Itoa(cfg.Concurrency),
		"-q"}
	if pw, ok := u.User.Password(); ok {
		args = append(args, "-a", pw)
		if name := u.User.Username(); name != "" {
			args = append(args, "--user", name)
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		args = append(args, "--dbnum", db)
	}
	// append.lua's KEYS and ARGV as the service sends them: the state delta
	// of loadgen's events (one session key), no user, temp or artifact changes.
	store = cache.NewStore(rdb, cache.Options{Keys: keys, Durable: durable})
	args = append(append(args, "EVALSHA", sha), store.AppendCommand(cache.AppendArgs{App: app, User: user, SID: sid,
		Incarnation: inc, Ts: time.Now().UnixMicro(), InvocationID: "bench-inv", EventID: "bench-event",
		EventPre: pre, EventPost: post, Delta: cache.StateDelta{Session: []cache.Pair{{Key: "counter", Value: "1"}}}})...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	defer cleanupCeiling(context.WithoutCancel(ctx), redisURL)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %v: %s", err, lastLine(out))
	}
	return parseRequestsPerSecond(string(out))
}

var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// parseRequestsPerSecond reads the last "N requests per second" of
// redis-benchmark -q output.
func parseRequestsPerSecond(out string) (float64, error) {
	m := rpsRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, fmt.Errorf("redis-benchmark printed no requests per second: %s", lastLine([]byte(out)))
	}
	return strconv.ParseFloat(m[len(m)-1][1], 64)
}

func lastLine(b []byte) string {
	lines := strings.FieldsFunc(strings.TrimSpace(string(b)), func(r rune) bool { return r == '\n' || r == '\r' })
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// cleanupCeiling deletes the ceiling's keys.
func cleanupCeiling(ctx context.Context, redisURL string) {
	rdb, err := cache.NewClient(redisURL)
	if err != nil {
		return
	}
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, ceilingNamespace+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Unlink(ctx, iter.Val())
	}
}
