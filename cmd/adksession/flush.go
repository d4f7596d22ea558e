package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/adksession/adksession/cmd/adksession/internal/progress"
	"github.com/adksession/adksession/service"
)

const flushAbout = `Runs the write-behind flusher without the HTTP API: it drains the Redis change log into the
database until SIGINT/SIGTERM, then flushes what is pending and exits. Several flush workers
(and serving processes) may run at once; they share the work. With --once it flushes what is
pending now and exits.`

func runFlush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f storeFlags
	fs := newFlagSet("flush", "[flags]", flushAbout, stderr)
	f.register(fs)
	once := fs.Bool("once", false, "flush what is pending, then exit")
	var timeout time.Duration
	registerDrainTimeout(fs, &timeout, "budget of the last flush on SIGTERM (or after --once); database errors are retried until it ends")
	var retention retentionFlags
	retention.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	f.resolve()
	if err := checkDrainTimeout(timeout); err != nil {
		return err
	}
	if f.redisURL == "" || f.databaseURL == "" {
		fmt.Fprintln(stderr, "adksession flush: give --redis (REDIS_URL) and --database (DATABASE_URL)")
		return errUsage
	}
	cfg := f.config()
	retention.apply(&cfg)
	svc, err := openService(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "flushing %s into %s\n", redact(f.redisURL), redact(f.databaseURL))
	if *once {
		if err := flushOnce(ctx, svc, stderr); err != nil {
			svc.Close(context.Background())
			return err
		}
	} else {
		<-ctx.Done()
	}
	drain, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The flusher stops before the pools close: Close flushes, then closes.
	return svc.Close(drain)
}

// flushOnce waits until what is pending now is in the database, showing
// the backlog going down.
func flushOnce(ctx context.Context, svc *service.Service, stderr io.Writer) error {
	b, err := svc.Backlog(ctx)
	if err != nil {
		return err
	}
	bar := progress.New(stderr, "flushed", b.Entries)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if now, err := svc.Backlog(ctx); err == nil {
					bar.Set(max(0, b.Entries-now.Entries))
				}
			}
		}
	}()
	err = svc.Flush(ctx)
	close(stop)
	<-polled
	if err == nil {
		bar.Set(b.Entries)
	}
	bar.Done()
	return err
}
