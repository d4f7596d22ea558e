package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// httpFlags bound what one client can hold of `adksession serve`: its
// connections' time (read, write and idle timeouts), the number of
// connections open at once, and the grace of the HTTP shutdown. No client,
// authenticated or not, can keep the server's file descriptors or its
// shutdown (docs/operations.md, "HTTP limits").
type httpFlags struct {
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	maxConnections                                            int
	shutdownGrace                                             time.Duration
}

func (f *httpFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "longest a client may take to send a request's headers (also how long a new connection may stay silent)")
	fs.DurationVar(&f.readTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a whole request, headers and body")
	fs.DurationVar(&f.writeTimeout, "write-timeout", 60*time.Second, "longest from a request's headers to the end of its answer (a client that does not read it is cut)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 60*time.Second, "longest a keep-alive connection may stay idle between requests")
	fs.IntVar(&f.maxConnections, "max-connections", 1024, "HTTP connections open at once; more wait in the listen backlog (keep it below the file-descriptor limit)")
	fs.DurationVar(&f.shutdownGrace, "http-shutdown-timeout", 10*time.Second, "grace of the requests in flight on SIGTERM; then the connections left are closed and the drain starts")
}

// validate refuses a zero or negative limit: every connection has timeouts.
func (f httpFlags) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--read-header-timeout", f.readHeaderTimeout}, {"--read-timeout", f.readTimeout},
		{"--write-timeout", f.writeTimeout}, {"--idle-timeout", f.idleTimeout},
		{"--http-shutdown-timeout", f.shutdownGrace},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", d.name, d.v)
		}
	}
	if f.maxConnections <= 0 {
		return fmt.Errorf("--max-connections must be positive, got %d", f.maxConnections)
	}
	return nil
}

// newHTTPServer is the server of h with the flags' timeouts.
func newHTTPServer(h http.Handler, f httpFlags) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: f.readHeaderTimeout,
		ReadTimeout:       f.readTimeout,
		WriteTimeout:      f.writeTimeout,
		IdleTimeout:       f.idleTimeout,
	}
}

// stopHTTP stops srv (serving ln; served receives what Serve returned)
// within grace: no new connections, the requests in flight finish. When the
// grace ends, the connections still open (a client sending its body slowly,
// one that does not read its answer) are closed, whatever they are doing:
// the drain that follows has a budget of its own.
func stopHTTP(srv *http.Server, ln *limitListener, served <-chan error, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		slog.Warn("adksession serve: HTTP grace over, closing the connections left", "grace", grace, "connections", ln.open.Load())
		err = srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// limitListener accepts at most cap(slots) connections at a time: Accept
// waits until one closes. Connections beyond the cap wait in the kernel's
// listen backlog, holding none of this process's file descriptors, so that
// clients can never take the ones Redis and the database need.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	open      atomic.Int64 // connections accepted and not closed
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.open.Add(1)
	return &limitedConn{Conn: c, l: l}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when it is closed (once).
type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		<-c.l.slots
	})
	return err
}
