package httpapi

import (
	"context"
	"net/http"
	"time"
)

// healthz answers 200 while the process serves.
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when Redis answers PING and Options.Ready passes
// (database reachable, migrations current), else 503 naming what failed.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	code := http.StatusOK
	if h.opt.Redis != nil {
		checks["redis"] = "ok"
		if err := h.opt.Redis.Ping(ctx).Err(); err != nil {
			h.metrics.errors.WithLabelValues("readyz", "redis").Inc()
			checks["redis"], code = err.Error(), http.StatusServiceUnavailable
		}
	}
	if h.opt.Ready != nil {
		checks["database"] = "ok"
		if err := h.opt.Ready(ctx); err != nil {
			checks["database"], code = err.Error(), http.StatusServiceUnavailable
		}
	}
	status := "ok"
	if code != http.StatusOK {
		status = "unavailable"
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": checks})
}
