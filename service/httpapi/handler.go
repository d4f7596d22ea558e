// Package httpapi serves a *service.Service over HTTP: the session API
// shaped like ADK's api_server (JSON in ADK's camelCase API form), Prometheus
// metrics, health and readiness probes, and the ops dashboard. Mount the
// http.Handler that New returns in any server; `adksession serve` is one.
//
// docs/http-api.md describes every route, its JSON and its errors.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
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

// Options configure the handler. Every field is optional.
type Options struct {
	// AuthToken, when set, is required as "Authorization: Bearer <token>"
	// on every route but /healthz, /readyz and the dashboard's static
	// files (the dashboard asks for the token and sends it).
	AuthToken string
	// MaxEventBytes is the service's Config.MaxEventBytes (default 1 MiB).
	// Request bodies are limited to it plus 64 KiB; a bigger body is 413.
	MaxEventBytes int
	// Registry is where the handler registers its metrics and the
	// service's (Service.Metrics: flush lag, backlog, dead letters, flusher
	// counters), and what /metrics serves. Register other collectors in it
	// too, but not Service.Metrics again. Default: a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
	// Redis is the deployment's Redis: /readyz pings it and the dashboard
	// shows its memory. Without it neither is checked.
	Redis redis.UniversalClient
	// CachedSessions counts the sessions Redis holds, for the dashboard.
	CachedSessions func(ctx context.Context) (int64, error)
	// FlushStats reports the write-behind for the dashboard (nil without
	// a database); wire it to Service.Backlog. /metrics exports the same
	// numbers through Service.Metrics.
	FlushStats func(ctx context.Context) (FlushStats, error)
	// Ready is an extra readiness check for /readyz (database reachable,
	// migrations current).
	Ready func(ctx context.Context) error
	// Logger logs internal errors (default slog.Default()).
	Logger *slog.Logger
}

// Handler is the HTTP API, metrics, probes and dashboard of one service.
// It is safe for concurrent use.
type Handler struct {
	svc     *service.Service
	opt     Options
	mux     *http.ServeMux
	metrics *metrics
	recent  *recentSessions
	count   cachedCount
	log     *slog.Logger
}

// New returns the handler of svc.
func New(svc *service.Service, opt Options) *Handler {
	if opt.MaxEventBytes <= 0 {
		opt.MaxEventBytes = 1 << 20
	}
	if opt.Registry == nil {
		opt.Registry = prometheus.NewRegistry()
		opt.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	h := &Handler{svc: svc, opt: opt, mux: http.NewServeMux(), recent: newRecentSessions(50), log: opt.Logger}
	h.metrics = newMetrics(opt.Registry)
	opt.Registry.MustRegister(svc.Metrics())
	h.routes()
	return h
}

// Registry is the registry /metrics serves.
func (h *Handler) Registry() *prometheus.Registry { return h.opt.Registry }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

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
		{"GET /apps/{app}/users/{user}/state", "user_state", h.userState},
		{"GET /api/overview", "overview", h.overview},
		{"GET /api/sessions", "search", h.search},
		{"GET /api/session", "inspect", h.inspect},
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
