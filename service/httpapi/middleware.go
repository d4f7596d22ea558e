package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// auth requires the bearer token when one is configured. Tokens are
// compared as SHA-256 digests in constant time, so neither their content nor
// their length leaks through timing. A refused request's connection is
// closed after the answer (Connection: close): a client without the token
// cannot keep connections of the server idle.
func (h *Handler) auth(next http.Handler) http.Handler {
	if h.opt.AuthToken == "" {
		return next
	}
	want := sha256.Sum256([]byte(h.opt.AuthToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			h.metrics.errors.WithLabelValues("auth", "unauthorized").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="adksession"`)
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// instrument runs an API handler: it limits the request body, refuses one
// that is not JSON (checkMediaType), answers its error as JSON, and records
// the request's duration and outcome.
func (h *Handler) instrument(route string, fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	limit := int64(h.svc.Config().MaxEventBytes) + 64<<10
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		code := 0
		err := checkMediaType(r)
		if err == nil {
			err = fn(sw, r)
		}
		if err != nil {
			var kind string
			code, kind = status(err)
			h.metrics.errors.WithLabelValues(route, kind).Inc()
			msg := err.Error()
			switch kind {
			case "internal", "redis", "timeout":
				// Details (addresses, driver errors) go to the log, not to clients.
				h.log.Error("adksession http", "route", route, "path", r.URL.Path, "err", err)
				msg = http.StatusText(code) + " (see the server log)"
			}
			if code == http.StatusRequestEntityTooLarge {
				msg = "request body over the limit of " + itoa(limit) + " bytes"
			}
			writeError(w, code, msg)
		} else {
			code = sw.code
		}
		h.metrics.requests.WithLabelValues(route, itoa(int64(code))).Inc()
		h.metrics.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}
