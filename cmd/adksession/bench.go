package main

import (
	"context"
	"fmt"
	"io"

	"github.com/adksession/adksession/cmd/adksession/internal/bench"
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
minimal atomic append (cache/scriptbench/reference_append.lua) and lua/append.lua itself; and Redis's script time per append
(INFO commandstats) against the minimal script's per call. With no --redis it runs against an embedded Redis.`

// runBench parses the bench command's flags, opens the service (on an
// embedded Redis with no --redis) and hands the run to package bench.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	var o bench.Options
	fs := newFlagSet("bench", "[flags]", benchAbout, stderr)
	f.register(fs)
	fs.IntVar(&o.Load.Sessions, "sessions", 100, "sessions `S`")
	fs.IntVar(&o.Load.Events, "events", 100, "events `E` per session")
	fs.IntVar(&o.Load.Concurrency, "concurrency", 10, "concurrent appenders `C`")
	fs.IntVar(&o.Load.PayloadBytes, "payload", 512, "text bytes `P` per event")
	fs.StringVar(&o.Load.App, "app", "bench", "app name of the sessions")
	httpURL := fs.String("http", "", "drive an adksession server at `URL` instead of the library")
	token := fs.String("auth-token", "", "bearer token for --http (env AUTH_TOKEN)")
	fs.BoolVar(&o.NoCeiling, "no-ceiling", false, "skip the redis-benchmark EVALSHA references")
	if err := parse(fs, args); err != nil {
		return err
	}
	f.resolve()
	o.Embedded = f.redisURL == "" && *httpURL == ""
	if o.Embedded {
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
	o.Target, o.Where = loadgen.Library{Svc: svc}, "library → "+redact(f.redisURL)
	if *httpURL != "" {
		o.Target, o.Where = loadgen.HTTP{BaseURL: *httpURL, AuthToken: orEnv(*token, "AUTH_TOKEN")}, "HTTP "+*httpURL
	}
	return bench.Run(ctx, svc, o, stdout, stderr)
}
