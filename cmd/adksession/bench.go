package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cmd/adksession/internal/loadgen"
	"github.com/adksession/adksession/service"
)

const benchAbout = `Appends S sessions × E events at concurrency C with a payload of P bytes, through the library
(or over HTTP with --http), then reads sessions back with a window and in full. Prints append
throughput and p50/p99 latency, Get latency, Redis bytes per cached event, how long the flusher
took to catch up (with a database, whose schema it migrates first), and, when redis-benchmark is installed, the ratio to an
EVALSHA ceiling measured in the same run: a script doing append.lua's Redis work, run by
redis-benchmark at the same concurrency. With no --redis it runs against an embedded Redis.`

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
	noCeiling := fs.Bool("no-ceiling", false, "skip the redis-benchmark EVALSHA ceiling")
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
	rep.bytesPerEvent, rep.bytesErr = redisBytesPerEvent(ctx, rdb, keys, res.SessionIDs)
	if !*noCeiling && !embedded {
		rep.ceiling, rep.ceilingErr = evalshaCeiling(ctx, f.redisURL, cfg, f.databaseURL != "")
	} else {
		rep.ceilingErr = fmt.Errorf("skipped")
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
	bytesPerEvent float64
	bytesErr      error
	ceiling       float64
	ceilingErr    error
}

func (r benchReport) write(w io.Writer) {
	res := r.res
	fmt.Fprintf(w, "appends       %d in %s = %.0f/s   p50 %s   p99 %s\n", res.Appends, res.Elapsed.Round(time.Millisecond), res.AppendsPerSec, ms(res.AppendP50), ms(res.AppendP99))
	fmt.Fprintf(w, "get window    %d newest: p50 %s   p99 %s\n", res.WindowEvents, ms(res.WindowP50), ms(res.WindowP99))
	fmt.Fprintf(w, "get full      %d events: p50 %s   p99 %s\n", res.FullEvents, ms(res.FullP50), ms(res.FullP99))
	if r.bytesErr != nil {
		fmt.Fprintf(w, "redis bytes   n/a (%v)\n", r.bytesErr)
	} else {
		fmt.Fprintf(w, "redis bytes   %.0f per cached event (event JSON %d B: ×%.2f)\n", r.bytesPerEvent, res.EventJSONBytes, r.bytesPerEvent/float64(res.EventJSONBytes))
	}
	if r.hasDatabase {
		fmt.Fprintf(w, "flush         caught up %s after the last append\n", r.flushDrain.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "flush         n/a (no database)\n")
	}
	if r.ceilingErr != nil {
		fmt.Fprintf(w, "ceiling       n/a (%v)\n", r.ceilingErr)
	} else {
		fmt.Fprintf(w, "ceiling       redis-benchmark EVALSHA %.0f/s at c=%d: appends at %.0f%% of the ceiling\n", r.ceiling, r.cfg.Concurrency, 100*res.AppendsPerSec/r.ceiling)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

// redisBytesPerEvent is MEMORY USAGE of the sampled sessions' event zsets
// over the events they hold.
func redisBytesPerEvent(ctx context.Context, rdb redis.UniversalClient, keys cache.Keys, refs []loadgen.Ref) (float64, error) {
	var bytes, events int64
	for i, ref := range refs {
		if i >= 20 {
			break
		}
		k := keys.Session(ref.App, ref.User, ref.ID).Events
		b, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return 0, fmt.Errorf("MEMORY USAGE: %w", err)
		}
		n, err := rdb.ZCard(ctx, k).Result()
		if err != nil {
			return 0, err
		}
		bytes, events = bytes+b, events+n
	}
	if events == 0 {
		return 0, fmt.Errorf("no cached events")
	}
	return float64(bytes) / float64(events), nil
}
