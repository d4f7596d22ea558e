package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/service"
)

const benchAbout = `Appends S sessions × E events at concurrency C with a payload of P bytes, through the library
(or over HTTP with --http), then reads sessions back with a window and in full (and, through the library, a full Get against a
raw ZRANGE of the same events with json.Valid on each, and with Postgres a cold Get against the same
rows read raw, each pair timed alternately). Prints append
throughput and p50/p99 latency, Get latency, Redis bytes per cached event, how long the flusher
took to catch up (with a database, whose schema it migrates first), and, when redis-benchmark is installed, the
ratios to two scripts run by redis-benchmark (EVALSHA, unpipelined) at the same concurrency in the same run: the
minimal atomic append (lua/reference_append.lua) and lua/append.lua itself; and Redis's script time per append
(INFO commandstats) against the minimal script's per call. With no --redis it runs against an embedded Redis.`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	var cfg loadgen.Config
	fs := newFlagSet("bench", "[flags]", benchAbout, stderr)
	f.register(fs)
	fs.IntVar(&cfg.Sessions, "sessions", 100, "sessions `S`")
	fs.IntVar(&cfg.Events, "events", 100, "events `E` per session")
	fs.IntVar(&cfg.Concurrency, "concurrency", 10, "concurrent appenders `C`")
	fs.IntVar(&cfg.PayloadBytes, "payload", 512, "text bytes `P` per event")
	fs.StringVar(&cfg.App, "app", "bench", "app name of the sessions")
	httpURL := fs.String("http", "", "drive an adksession server at `URL` instead of the library")
	token := fs.String("auth-token", "", "bearer token for --http (env AUTH_TOKEN)")
	noCeiling := fs.Bool("no-ceiling", false, "skip the redis-benchmark EVALSHA references")
	if err := parse(fs, args); err != nil {
		return err
	}
	f.resolve()
	embedded := f.redisURL == "" && *httpURL == ""
	if embedded {
		mr, url, err := startEmbeddedRedis("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer mr.Close()
		f.redisURL = url
	}
	if f.databaseURL != "" {
		// The schema the flusher writes; migrating is idempotent.
		if err := service.Migrate(ctx, f.databaseURL); err != nil {
			return fmt.Errorf("migrate %s: %w", redact(f.databaseURL), err)
		}
	}
	svc, err := openService(ctx, f.config())
	if err != nil {
		return err
	}
	defer svc.Close(context.Background())
	var target loadgen.Target = loadgen.Library{Svc: svc}
	where := "library → " + redact(f.redisURL)
	if *httpURL != "" {
		target = loadgen.HTTP{BaseURL: *httpURL, AuthToken: orEnv(*token, "AUTH_TOKEN")}
		where = "HTTP " + *httpURL
	}
	fmt.Fprintf(stdout, "adksession bench: %d sessions × %d events, concurrency %d, payload %d B, %s\n",
		cfg.Sessions, cfg.Events, cfg.Concurrency, cfg.PayloadBytes, where)

	bar := newProgress(stderr, "appends", int64(cfg.Sessions*cfg.Events))
	cfg.Progress = bar.set
	var stats *redisStats
	if f.redisURL != "" && !embedded {
		if stats, err = newRedisStats(f.redisURL); err != nil {
			return err
		}
		defer stats.Close()
		cfg.AppendPhase = stats.phase(ctx)
	}
	res, err := loadgen.Run(ctx, target, cfg)
	bar.done()
	if err != nil {
		return err
	}
	appendsEnd := time.Now()
	rep := benchReport{res: res, cfg: cfg}
	if f.databaseURL != "" {
		if err := svc.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		rep.flushDrain = time.Since(appendsEnd)
		rep.hasDatabase = true
	}
	keys, err := cache.NewKeys(f.namespace, f.shards)
	if err != nil {
		return err
	}
	rdb, err := cache.NewClient(f.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rep.bytesPerEvent, rep.bytesAllPerEvent, rep.bytesErr = redisBytesPerEvent(ctx, rdb, keys, res.SessionIDs)
	if *httpURL == "" {
		rep.reads = measureReads(ctx, svc, rdb, keys, res.SessionIDs, f.databaseURL)
	} else {
		rep.reads = readRatios{fullErr: errors.New("over HTTP"), colErr: errors.New("over HTTP")}
	}
	if stats != nil {
		rep.redisUsec, rep.redisErr = stats.perAppend(res.Appends)
	} else {
		rep.redisErr = errors.New("no Redis to read")
	}
	if !*noCeiling && !embedded {
		rep.refs, rep.refsErr = measureReferences(ctx, f.redisURL, cfg, f.databaseURL != "")
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
