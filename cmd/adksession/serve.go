package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

const serveAbout = `Serves the HTTP API (shaped like ADK's api_server), the ops dashboard at /, Prometheus
metrics at /metrics and the probes /healthz and /readyz.

With no --redis and no REDIS_URL it starts an embedded, in-process Redis on a local port
(--embedded-redis), and with no --database a SQLite file (./adksession.db) behind it; it prints
where both are. Otherwise it uses the Redis and database named.

The first SIGINT/SIGTERM drains: the HTTP server stops taking requests and finishes those in
flight (for up to --http-shutdown-timeout, then it closes the connections left), then the
write-behind flushes what is pending (for up to --drain-timeout of its own, retrying database
errors) and the connections close. A second signal aborts at once.

Every connection has read, write and idle timeouts, and at most --max-connections are open at
once, so that no client can hold the server's file descriptors or its shutdown.

Browsers: a request whose Origin is not the server's own (or an --allow-origin one) is refused,
and over loopback the Host must be localhost or an IP address (or an --allow-host name), so
that no web page can use the server. Without --auth-token it listens on loopback only, unless
--no-auth is given.`

// serveFlags are the flags of `adksession serve`.
type serveFlags struct {
	store             storeFlags
	addr, authToken   string
	noAuth            bool
	allowOrigins      listFlag
	allowHosts        listFlag
	embeddedRedis     string
	dbFile            string
	migrate           bool
	concurrentAppends bool
	noFlusher         bool
	maxEventBytes     int
	stateCaps         [3]int // Config.MaxAppStateBytes, MaxUserStateBytes, MaxSessionStateBytes
	http              httpFlags
	drainTimeout      time.Duration
	retention         retentionFlags
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := newFlagSet("serve", "[flags]", serveAbout, stderr)
	f.store.register(fs)
	fs.StringVar(&f.addr, "addr", "", "HTTP listen `address` (env ADDR; default 127.0.0.1:8080)")
	fs.StringVar(&f.authToken, "auth-token", "", "require \"Authorization: Bearer `TOKEN`\" on the API, metrics and dashboard data (env AUTH_TOKEN)")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve beyond loopback without --auth-token (and put the embedded Redis there): something in front must authenticate")
	fs.Var(&f.allowOrigins, "allow-origin", "`origin` (https://app.example) whose web pages may call the API, with CORS; repeatable or comma-separated (env ALLOW_ORIGINS)")
	fs.Var(&f.allowHosts, "allow-host", "host `name` the Host header may carry besides localhost and IP addresses; repeatable or comma-separated (env ALLOW_HOSTS)")
	fs.StringVar(&f.embeddedRedis, "embedded-redis", "127.0.0.1:0", "listen `address` of the embedded Redis when no --redis is given (port 0: a free one)")
	fs.StringVar(&f.dbFile, "db-file", defaultDBFile, "SQLite `file` of the embedded default when no --database is given")
	fs.BoolVar(&f.migrate, "migrate", false, "migrate the database schema at start (always done for the embedded SQLite file)")
	fs.BoolVar(&f.concurrentAppends, "concurrent-appends", false, "let appends through an out-of-date handle apply (Config.ConcurrentAppends) instead of answering 409")
	fs.BoolVar(&f.noFlusher, "no-flusher", false, "run no flusher in this process (`adksession flush` workers drain the change log)")
	fs.IntVar(&f.maxEventBytes, "max-event-bytes", 0, "largest event JSON accepted (Config.MaxEventBytes; 0: its default, 1 MiB); request bodies may be 64 KiB more")
	fs.IntVar(&f.stateCaps[0], "max-app-state-bytes", 0, "largest state of an app, its keys and JSON values summed (Config.MaxAppStateBytes; 0: its default, 2 × the event limit)")
	fs.IntVar(&f.stateCaps[1], "max-user-state-bytes", 0, "largest state of a user in an app (Config.MaxUserStateBytes; 0: its default, 2 × the event limit)")
	fs.IntVar(&f.stateCaps[2], "max-session-state-bytes", 0, "largest state of a session (Config.MaxSessionStateBytes; 0: its default, 4 × the event limit)")
	f.http.register(fs)
	registerDrainTimeout(fs, &f.drainTimeout, "budget of the write-behind's drain on SIGTERM, from when HTTP has stopped")
	f.retention.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "adksession serve: unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	f.store.resolve()
	f.addr = orEnv(f.addr, "ADDR")
	if f.addr == "" {
		f.addr = "127.0.0.1:8080"
	}
	f.authToken = orEnv(f.authToken, "AUTH_TOKEN")
	f.allowOrigins = orEnvList(f.allowOrigins, "ALLOW_ORIGINS")
	f.allowHosts = orEnvList(f.allowHosts, "ALLOW_HOSTS")
	srv, err := startServer(ctx, f, stdout)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return srv.shutdown()
}

// server is a running `adksession serve`.
type server struct {
	url      string // http://host:port
	ln       *limitListener
	http     *http.Server
	handler  *httpapi.Handler
	served   chan error
	svc      *service.Service
	embedded *miniredis.Miniredis
	// grace is the HTTP shutdown's (--http-shutdown-timeout), drain the
	// write-behind's budget after it (--drain-timeout).
	grace, drain time.Duration
}

// startServer checks the flags, listens, opens the stores, starts the HTTP
// server and prints where everything is. Whatever step fails, what the
// steps before it opened is closed, and the error says which step.
func startServer(ctx context.Context, f serveFlags, stdout io.Writer) (*server, error) {
	guard := httpapi.Options{AllowedOrigins: f.allowOrigins, AllowedHosts: f.allowHosts}
	if err := guard.Validate(); err != nil {
		return nil, err
	}
	if err := f.http.validate(); err != nil {
		return nil, err
	}
	if err := checkDrainTimeout(f.drainTimeout); err != nil {
		return nil, err
	}
	if err := checkExposure(ctx, f); err != nil {
		return nil, err
	}
	// Listen first: an address in use is refused before anything is opened.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on --addr %s: %w", f.addr, err)
	}
	s := &server{ln: newLimitListener(ln, f.http.maxConnections), served: make(chan error, 1),
		grace: f.http.shutdownGrace, drain: f.drainTimeout}
	started := false
	defer func() {
		if !started {
			s.ln.Close()
			s.closeStores(context.Background())
		}
	}()
	if f.store.redisURL == "" {
		s.embedded, f.store.redisURL, err = startEmbeddedRedis(f.embeddedRedis)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stdout, "redis:    %s (embedded, in-process: unflushed data is lost on exit)\n", f.store.redisURL)
		if f.store.databaseURL == "" {
			if f.store.databaseURL, err = sqliteURL(f.dbFile); err != nil {
				return nil, err
			}
			f.migrate = true
		}
	} else {
		fmt.Fprintf(stdout, "redis:    %s\n", redact(f.store.redisURL))
	}
	if f.store.databaseURL != "" {
		if f.migrate {
			if err := service.Migrate(ctx, f.store.databaseURL); err != nil {
				return nil, fmt.Errorf("migrate %s: %w", redact(f.store.databaseURL), err)
			}
		}
		fmt.Fprintf(stdout, "database: %s\n", redact(f.store.databaseURL))
	} else {
		fmt.Fprintf(stdout, "database: none (Redis holds everything; nothing expires)\n")
	}

	cfg := f.store.config()
	cfg.ConcurrentAppends, cfg.DisableFlusher, cfg.MaxEventBytes = f.concurrentAppends, f.noFlusher, f.maxEventBytes
	cfg.MaxAppStateBytes, cfg.MaxUserStateBytes, cfg.MaxSessionStateBytes = f.stateCaps[0], f.stateCaps[1], f.stateCaps[2]
	f.retention.apply(&cfg)
	// The in-process Redis never evicts and has no CONFIG to ask.
	cfg.AllowAllKeysEviction = cfg.AllowAllKeysEviction || s.embedded != nil
	if s.svc, err = service.Open(ctx, cfg); err != nil {
		return nil, err
	}
	// The handler reads Redis through the service (its pool, its keys).
	opt := httpapi.Options{
		AllowedOrigins: f.allowOrigins,
		AllowedHosts:   f.allowHosts,
		AuthToken:      f.authToken,
		Logger:         slog.Default(),
	}
	if f.store.databaseURL != "" {
		opt.Ready = s.svc.Ready
		opt.FlushStats = func(ctx context.Context) (httpapi.FlushStats, error) {
			b, err := s.svc.RecentBacklog(ctx)
			return httpapi.FlushStats{Lag: b.Lag, Backlog: b.Entries, DeadLetters: b.Dead}, err
		}
	}
	s.url = "http://" + ln.Addr().String()
	s.handler = httpapi.New(s.svc, opt)
	s.http = newHTTPServer(s.handler, f.http)
	go func() { s.served <- s.http.Serve(s.ln) }()
	started = true
	auth := ""
	if f.authToken == "" {
		auth = ", no token"
	}
	fmt.Fprintf(stdout, "http:     %s (dashboard at /, metrics at /metrics%s)\n", s.url, auth)
	return s, nil
}

// shutdown drains in this order, each step with a budget of its own, so
// that no client can spend the drain's:
//
//  1. HTTP server, within the grace (--http-shutdown-timeout): no new
//     connections, the requests in flight finish; when the grace ends, the
//     connections left are closed (stopHTTP). Appenders: every append came
//     over HTTP, so every acknowledged one is in the change log. A handler
//     cut at the end of the grace (its context ends with its connection)
//     acknowledged nothing; a write of it that reached Redis is flushed by
//     the drain or waits in the change log for the next flusher.
//  2. The dashboard's sampler (handler.Close).
//  3. Flusher, for --drain-timeout from here: svc.Close flushes what is
//     pending, retrying transient database errors until that budget ends.
//  4. Pools: Redis and database connections, then the embedded Redis.
func (s *server) shutdown() error {
	herr := stopHTTP(s.http, s.ln, s.served, s.grace)
	s.handler.Close()
	ctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	return errors.Join(herr, s.closeStores(ctx))
}

// closeStores closes the service (which drains the write-behind, bounded
// by ctx, then closes its connections), then the embedded Redis.
func (s *server) closeStores(ctx context.Context) error {
	var errs []error
	if s.svc != nil {
		errs = append(errs, s.svc.Close(ctx))
	}
	if s.embedded != nil {
		s.embedded.Close()
	}
	return errors.Join(errs...)
}
