package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/scriptbench"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
)

// ceilingNamespace keeps the references' keys apart from every deployment's.
const ceilingNamespace = "adksession-bench-ceiling:"

// references are the scripts a run's appends are compared with, measured
// by redis-benchmark (EVALSHA, unpipelined) at the run's concurrency and
// number of appends: the minimal atomic append (scriptbench.Reference)
// and lua/append.lua itself.
type references struct {
	minimal, script scriptbench.Result
}

// measureReferences measures the references on the standalone Redis at
// redisURL. The append.lua run is scriptbench.AppendCeiling (the same Redis
// work as one append, each call appending to one session) with the
// arguments the service sends for loadgen's events (tempTTL: the service's
// Config.TempTTL); durable adds the change-log work append.lua does with a
// database.
func measureReferences(ctx context.Context, redisURL string, tempTTL time.Duration, cfg loadgen.Config, durable bool) (references, error) {
	var refs references
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return refs, errors.New("redis-benchmark not installed")
	}
	rdb, err := cache.NewClient(redisURL)
	if err != nil {
		return refs, err
	}
	defer rdb.Close()
	defer cleanupCeiling(context.WithoutCancel(ctx), redisURL)
	keys, err := cache.NewKeys(ceilingNamespace, 0)
	if err != nil {
		return refs, err
	}
	const app, user, sid = "bench", "u", "ceiling"
	opts := cache.Options{Keys: keys, Durable: durable, TempTTL: tempTTL}
	store := cache.NewStore(rdb, opts)
	if err := store.Create(ctx, cache.CreateArgs{SessionRef: base.SessionRef{App: app, User: user, ID: sid}, CreateTime: time.Now().UnixMicro()}); err != nil && !errors.Is(err, base.ErrAlreadyExists) {
		return refs, fmt.Errorf("reference session: %w", err)
	}
	k := keys.Session(app, user, sid)
	inc, err := rdb.HGet(ctx, k.Session, "m:inc").Int64()
	if err != nil {
		return refs, fmt.Errorf("reference session: %w", err)
	}
	ev, err := loadgen.Event(0, cfg.PayloadBytes).MarshalJSON()
	if err != nil {
		return refs, err
	}
	pre, post, err := cache.SplitTimestamp(ev)
	if err != nil {
		return refs, err
	}
	n := cfg.Sessions * cfg.Events
	if refs.minimal, err = scriptbench.Run(ctx, bin, redisURL, cfg.Concurrency, n, scriptbench.Reference(ceilingNamespace, ev)); err != nil {
		return refs, fmt.Errorf("minimal script: %w", err)
	}
	// append.lua's KEYS and ARGV as the service sends them: the state delta
	// of loadgen's events (a session, a user: and a temp: key), no app or
	// artifact changes.
	args, err := scriptbench.AppendCommand(opts, cache.AppendArgs{
		SessionRef: base.SessionRef{App: app, User: user, ID: sid}, Incarnation: inc, Ts: time.Now().UnixMicro(), InvocationID: "bench-inv",
		EventID: "bench-event", EventPre: pre, EventPost: post,
		Delta: cache.StateDelta{Session: []cache.Pair{{Key: "counter", Value: "1"}},
			User: []cache.Pair{{Key: "last", Value: "1"}}, Temp: []cache.Pair{{Key: "temp:step", Value: "1"}}}})
	if err != nil {
		return refs, err
	}
	script := scriptbench.Call{Src: scriptbench.AppendCeiling(), Counted: k.Events, Args: args}
	if refs.script, err = scriptbench.Run(ctx, bin, redisURL, cfg.Concurrency, n, script); err != nil {
		return refs, fmt.Errorf("append.lua: %w", err)
	}
	return refs, nil
}

// cleanupCeiling deletes the references' keys.
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
