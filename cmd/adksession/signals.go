package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// signalContext returns a context cancelled by the first SIGINT or SIGTERM,
// which starts a graceful drain. A second signal aborts at once: the drain
// may be waiting on a database that is down, and the operator has decided.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "adksession: %v: draining (send it again to abort)\n", sig)
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "adksession: %v again: aborting without draining\n", sig)
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
