package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/adksession/adksession/service"
)

// healthz answers 200 while the process serves.
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when Redis answers PING and Options.Ready passes
// (database reachable, migrations current), else 503 naming what failed
// with a fixed reason: "redis unavailable", "database unavailable" or
// "schema not migrated". The probe needs no token, so the error itself
// (addresses, driver messages) goes to the log only. The database is
// checked only when Redis answers (service.Ready checks Redis first).
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"redis": "ok"}
	code := http.StatusOK
	if err := h.opt.Redis.Ping(ctx).Err(); err != nil {
		h.metrics.errors.WithLabelValues("readyz", "redis").Inc()
		h.log.Warn("adksession readyz: redis", "err", err)
		checks["redis"], code = "redis unavailable", http.StatusServiceUnavailable
	}
	if h.opt.Ready != nil {
		checks["database"] = "ok"
		if code != http.StatusOK {
			checks["database"] = "not checked"
		} else if err := h.opt.Ready(ctx); err != nil {
			h.log.Warn("adksession readyz: database", "err", err)
			checks["database"], code = "database unavailable", http.StatusServiceUnavailable
			if errors.Is(err, service.ErrSchema) {
				checks["database"] = "schema not migrated"
			}
		}
	}
	status := "ok"
	if code != http.StatusOK {
		status = "unavailable"
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": checks})
}
