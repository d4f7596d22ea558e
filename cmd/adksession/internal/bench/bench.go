// Package bench is the body of `adksession bench`: the load through
// loadgen, then the reads, the Redis figures and the redis-benchmark
// references of cache/scriptbench, and the report. The command's flags and
// the service it runs on are cmd/adksession's.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/cmd/adksession/internal/progress"
	"github.com/adksession/adksession/service"
)

// Options are a run's: what the bench command's flags give.
type Options struct {
	Load   loadgen.Config
	Target loadgen.Target // the service itself (loadgen.Library) or a server (loadgen.HTTP)
	Where  string         // the target, for the report's first line
	// Embedded: the service runs on an embedded Redis, which has no
	// INFO commandstats and no redis-benchmark to measure with.
	Embedded  bool
	NoCeiling bool // skip the redis-benchmark references
}

// Run runs the load against o.Target, svc being the service that the
// reads, the flush and the Redis figures go through, and writes the report
// to stdout (the progress bar to stderr).
func Run(ctx context.Context, svc *service.Service, o Options, stdout, stderr io.Writer) error {
	cfg, scfg := o.Load, svc.Config()
	_, overHTTP := o.Target.(loadgen.HTTP)
	fmt.Fprintf(stdout, "adksession bench: %d sessions × %d events, concurrency %d, payload %d B, %s\n",
		cfg.Sessions, cfg.Events, cfg.Concurrency, cfg.PayloadBytes, o.Where)

	bar := progress.New(stderr, "appends", int64(cfg.Sessions*cfg.Events))
	cfg.Progress = bar.Set
	var stats *redisStats
	var err error
	if !o.Embedded {
		if stats, err = newRedisStats(scfg.RedisURL); err != nil {
			return err
		}
		defer stats.Close()
		cfg.AppendPhase = stats.phase(ctx)
	}
	res, err := loadgen.Run(ctx, o.Target, cfg)
	bar.Done()
	if err != nil {
		return err
	}
	appendsEnd := time.Now()
	rep := benchReport{res: res, cfg: cfg}
	if scfg.DatabaseURL != "" {
		if err := svc.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		rep.flushDrain = time.Since(appendsEnd)
		rep.hasDatabase = true
	}
	keys, err := cache.NewKeys(scfg.Namespace, scfg.Shards)
	if err != nil {
		return err
	}
	rdb, err := cache.NewClient(scfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rep.bytesPerEvent, rep.bytesAllPerEvent, rep.bytesErr = redisBytesPerEvent(ctx, rdb, keys, res.SessionIDs)
	if !overHTTP {
		rep.reads = measureReads(ctx, svc, rdb, keys, res.SessionIDs, scfg.DatabaseURL)
	} else {
		rep.reads = readRatios{fullErr: errors.New("over HTTP"), colErr: errors.New("over HTTP")}
	}
	if stats != nil {
		rep.redisUsec, rep.redisErr = stats.perAppend(res.Appends)
	} else {
		rep.redisErr = errors.New("no Redis to read")
	}
	if !o.NoCeiling && !o.Embedded {
		rep.refs, rep.refsErr = measureReferences(ctx, scfg.RedisURL, scfg.TempTTL, cfg, scfg.DatabaseURL != "")
	} else {
		rep.refsErr = errors.New("skipped")
	}
	rep.write(stdout)
	return nil
}

// benchReport prints a run.
type benchReport struct {
	res           *loadgen.Result
	cfg           loadgen.Config
	hasDatabase   bool
	flushDrain    time.Duration
	bytesPerEvent float64 // the events zset's bytes per event
	// bytesAllPerEvent adds the event ids zset and the undo records.
	bytesAllPerEvent float64
	bytesErr         error
	redisUsec        float64 // Redis script time per append, µs
	redisErr         error
	refs             references
	refsErr          error
	reads            readRatios
}

func (r benchReport) write(w io.Writer) {
	res := r.res
	fmt.Fprintf(w, "appends       %d in %s = %.0f/s   p50 %s   p99 %s\n", res.Appends, res.Elapsed.Round(time.Millisecond), res.AppendsPerSec, ms(res.AppendP50), ms(res.AppendP99))
	fmt.Fprintf(w, "get window    %d newest: p50 %s   p99 %s\n", res.WindowEvents, ms(res.WindowP50), ms(res.WindowP99))
	fmt.Fprintf(w, "get full      %d events: p50 %s   p99 %s\n", res.FullEvents, ms(res.FullP50), ms(res.FullP99))
	r.reads.write(w)
	if r.bytesErr != nil {
		fmt.Fprintf(w, "redis bytes   n/a (%v)\n", r.bytesErr)
	} else {
		fmt.Fprintf(w, "redis bytes   %.0f per cached event (event JSON %d B: ×%.2f); with its id and undo record %.0f (×%.2f)\n",
			r.bytesPerEvent, res.EventJSONBytes, r.bytesPerEvent/float64(res.EventJSONBytes),
			r.bytesAllPerEvent, r.bytesAllPerEvent/float64(res.EventJSONBytes))
	}
	if r.hasDatabase {
		fmt.Fprintf(w, "flush         caught up %s after the last append\n", r.flushDrain.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "flush         n/a (no database)\n")
	}
	if r.redisErr != nil {
		fmt.Fprintf(w, "redis time    n/a (%v)\n", r.redisErr)
	} else {
		fmt.Fprintf(w, "redis time    %.1fµs of scripts per append (INFO commandstats EVALSHA µs ÷ appends)\n", r.redisUsec)
	}
	if r.refsErr != nil {
		fmt.Fprintf(w, "references    n/a (%v)\n", r.refsErr)
		return
	}
	c := r.cfg.Concurrency
	fmt.Fprintf(w, "minimal       reference_append.lua, redis-benchmark EVALSHA at c=%d: %.0f/s, Redis %.1fµs per call\n", c, r.refs.minimal.RPS, r.refs.minimal.RedisUsec)
	fmt.Fprintf(w, "append.lua    alone, redis-benchmark EVALSHA at c=%d: %.0f/s, Redis %.1fµs per call\n", c, r.refs.script.RPS, r.refs.script.RedisUsec)
	fmt.Fprintf(w, "ratio-ref     %.3f (appends/s ÷ the minimal script's calls/s)\n", res.AppendsPerSec/r.refs.minimal.RPS)
	fmt.Fprintf(w, "ratio-script  %.3f (appends/s ÷ append.lua's calls/s)\n", res.AppendsPerSec/r.refs.script.RPS)
	if r.redisErr == nil && r.refs.minimal.RedisUsec > 0 {
		fmt.Fprintf(w, "redis-ratio   %.2f (Redis µs per append ÷ the minimal script's per call)\n", r.redisUsec/r.refs.minimal.RedisUsec)
	} else {
		fmt.Fprintf(w, "redis-ratio   n/a\n")
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

// redisBytesPerEvent is MEMORY USAGE of the sampled sessions' events
// zsets per event (zset), and of the zsets, their event ids zsets and
// undo hashes per event (all).
func redisBytesPerEvent(ctx context.Context, rdb redis.UniversalClient, keys cache.Keys, refs []loadgen.Ref) (zset, all float64, err error) {
	var zbytes, abytes, events int64
	for i, ref := range refs {
		if i >= 20 {
			break
		}
		k := keys.Session(ref.App, ref.User, ref.ID)
		for _, key := range []string{k.Events, k.EventIDs, k.Undo} {
			b, err := rdb.MemoryUsage(ctx, key, 0).Result()
			if errors.Is(err, redis.Nil) {
				continue // no undo records (they were too big, or evicted)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("MEMORY USAGE: %w", err)
			}
			if key == k.Events {
				zbytes += b
			}
			abytes += b
		}
		n, err := rdb.ZCard(ctx, k.Events).Result()
		if err != nil {
			return 0, 0, err
		}
		events += n
	}
	if events == 0 {
		return 0, 0, fmt.Errorf("no cached events")
	}
	return float64(zbytes) / float64(events), float64(abytes) / float64(events), nil
}
