// Package httpapi serves a *service.Service over HTTP: the session API
// shaped like ADK's api_server (JSON in ADK's camelCase API form), Prometheus
// metrics, health and readiness probes, and the ops dashboard. Mount the
// http.Handler that New returns in any server; `adksession serve` is one.
//
// docs/http-api.md describes every route, its JSON and its errors.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/service"
)

// FlushStats is the state of the write-behind, as the flusher reports it.
type FlushStats struct {
	// Lag is the age of the oldest change not yet in the database.
	Lag time.Duration
	// Backlog is the number of changes not yet in the database.
	Backlog int64
	// DeadLetters is the number of changes the database refused for good.
	DeadLetters int64
}

// Options configure the handler. Every field is optional. Request bodies are
// limited to the service's Config.MaxEventBytes plus 64 KiB (413 beyond).
type Options struct {
	// AuthToken, when set, is required as "Authorization: Bearer <token>"
	// on every route but /healthz, /readyz and the dashboard's static
	// files (the dashboard asks for the token and sends it).
	AuthToken string
	// Registry is where the handler registers its metrics and the
	// service's (Service.Metrics: flush lag, backlog, dead letters, flusher
	// counters), and what /metrics serves. Register other collectors in it
	// too, but not Service.Metrics again. Default: a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
	// Redis is the Redis /readyz pings and whose memory the dashboard
	// shows. Default: the service's (Service.Redis).
	Redis redis.UniversalClient
	// CachedSessions counts the sessions Redis holds, for the dashboard.
	// Default: Service.CachedSessions.
	CachedSessions func(ctx context.Context) (int64, error)
	// FlushStats reports the write-behind for the dashboard (nil without
	// a database); wire it to Service.RecentBacklog. /metrics exports the same
	// numbers through Service.Metrics.
	FlushStats func(ctx context.Context) (FlushStats, error)
	// Ready is an extra readiness check for /readyz (database reachable,
	// migrations current).
	Ready func(ctx context.Context) error
	// Logger logs internal errors (default slog.Default()).
	Logger *slog.Logger
	// AllowedOrigins are origins ("https://app.example": scheme, host and
	// port if not the default) besides the server's own whose pages may
	// call the API from a browser: their requests pass the Origin check and
	// get CORS headers. A request with any other Origin is 403. No wildcard.
	AllowedOrigins []string
	// HistoryInterval is how often the dashboard's history (the last 15
	// minutes of appends/s, append latency, flush lag, backlog, dead
	// letters and Redis memory) is sampled: default 5 s; negative: no
	// history. Sampling runs in a goroutine of the handler until Close.
	HistoryInterval time.Duration
	// AllowedHosts are host names (no port) the Host header may name besides
	// localhost and IP addresses. A request that arrives over loopback must
	// name one of those; when AllowedHosts is set, every request must.
	// Otherwise 403 (the guard against DNS rebinding).
	AllowedHosts []string
}

// Validate checks AllowedOrigins and AllowedHosts; New panics on what it
// refuses, so check options from configuration with it first.
func (o Options) Validate() error {
	_, _, err := o.allowed()
	return err
}

// allowed is AllowedOrigins and AllowedHosts as sets, normalized.
func (o Options) allowed() (origins, hosts map[string]bool, err error) {
	origins, hosts = map[string]bool{}, map[string]bool{}
	for _, s := range o.AllowedOrigins {
		n, err := normalizeOrigin(s)
		if err != nil {
			return nil, nil, fmt.Errorf("allowed origin: %w", err)
		}
		origins[n] = true
	}
	for _, s := range o.AllowedHosts {
		n := strings.ToLower(s)
		if n == "" || hostName(n) != n || strings.ContainsAny(n, "/[]@ ") {
			return nil, nil, fmt.Errorf("allowed host %q: want a host name without port", s)
		}
		hosts[n] = true
	}
	return origins, hosts, nil
}

// Handler is the HTTP API, metrics, probes and dashboard of one service.
// It is safe for concurrent use.
type Handler struct {
	// origins and hosts are Options.AllowedOrigins and AllowedHosts, normalized.
	origins, hosts map[string]bool

	svc     *service.Service
	opt     Options
	mux     *http.ServeMux
	metrics *metrics
	recent  *recentSessions
	count   cachedCount
	log     *slog.Logger
	history *history // nil without history
}

// New returns the handler of svc. It panics when opt.Validate fails.
func New(svc *service.Service, opt Options) *Handler {
	origins, hosts, err := opt.allowed()
	if err != nil {
		panic("httpapi.New: " + err.Error())
	}
	if opt.Redis == nil {
		opt.Redis = svc.Redis()
	}
	if opt.CachedSessions == nil {
		opt.CachedSessions = svc.CachedSessions
	}
	if opt.HistoryInterval == 0 {
		opt.HistoryInterval = 5 * time.Second
	}
	if opt.Registry == nil {
		opt.Registry = prometheus.NewRegistry()
		opt.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	h := &Handler{svc: svc, opt: opt, mux: http.NewServeMux(), recent: newRecentSessions(50), log: opt.Logger, origins: origins, hosts: hosts}
	h.metrics = newMetrics(opt.Registry)
	opt.Registry.MustRegister(svc.Metrics())
	h.routes()
	if opt.HistoryInterval > 0 {
		h.history = newHistory(h, opt.HistoryInterval)
		h.history.start()
	}
	return h
}

// Close stops the sampling of the dashboard's history. Call it when the
// server stops (after http.Server.Shutdown); the handler answers the
// history it has after that. Calling it again is a no-op.
func (h *Handler) Close() {
	if h.history != nil {
		h.history.close()
	}
}

// Registry is the registry /metrics serves.
func (h *Handler) Registry() *prometheus.Registry { return h.opt.Registry }

// ServeHTTP implements http.Handler: the guard (Host and Origin checks),
// then the route. A path with an empty, "." or ".." segment is 404:
// http.ServeMux would redirect it to the cleaned path, where a POST to
// .../sessions//events would create a session named "events". Ids that
// are "." or ".." are sent escaped (%2E).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.guard(w, r) {
		return
	}
	if p := r.URL.EscapedPath(); p != cleanPath(p) {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+p+": empty, . or .. path segment")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// cleanPath is p as http.ServeMux cleans it (a trailing slash stays).
func cleanPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

func (h *Handler) routes() {
	const s = "/apps/{app}/users/{user}/sessions"
	api := []struct {
		pattern, route string
		fn             func(http.ResponseWriter, *http.Request) error
	}{
		{"POST " + s, "create", h.create},
		{"POST " + s + "/{id}", "create", h.createWithID},
		{"GET " + s + "/{id}", "get", h.get},
		{"GET " + s, "list", h.list},
		{"DELETE " + s + "/{id}", "delete", h.delete},
		{"PATCH " + s + "/{id}", "update", h.update},
		{"POST " + s + "/{id}/events", "append", h.appendEvent},
		{"POST " + s + "/{id}/rewind", "rewind", h.rewind},
		{"POST " + s + "/{id}/fork", "fork", h.fork},
		{"GET /apps/{app}/users/{user}/state", "user_state", h.userState},
		{"GET /api/overview", "overview", h.overview},
		{"GET /api/sessions", "search", h.search},
		{"GET /api/session", "inspect", h.inspect},
		{"GET /api/dashboard/history", "history", h.dashboardHistory},
		{"GET /api/deadletters", "dead_letters", h.deadLetters},
		{"POST /api/deadletters/retry", "dead_letter_retry", h.retryDeadLetter},
		{"POST /api/deadletters/drop", "dead_letter_drop", h.dropDeadLetter},
	}
	for _, a := range api {
		h.mux.Handle(a.pattern, h.auth(h.instrument(a.route, a.fn)))
	}
	h.mux.Handle("GET /metrics", h.auth(h.metrics.handler(h.opt.Registry)))
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.mux.Handle("GET /{$}", dashboard())
	h.mux.Handle("GET /ui/", http.StripPrefix("/ui", dashboard()))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
}
