package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/service"
)

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(msg string) error { return &httpError{http.StatusBadRequest, msg} }

// status maps an error to its HTTP status and the kind it is counted as in
// adksession_errors_total.
func status(err error) (code int, kind string) {
	var he *httpError
	var tooBig *http.MaxBytesError
	var redisErr redis.Error
	var netErr net.Error
	switch {
	case errors.As(err, &he):
		switch he.status {
		case http.StatusNotImplemented:
			return he.status, "not_implemented"
		case http.StatusUnsupportedMediaType:
			return he.status, "unsupported_media_type"
		}
		return he.status, "invalid"
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, service.ErrInvalidArgument):
		return http.StatusBadRequest, "invalid"
	case errors.Is(err, service.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, service.ErrAlreadyExists):
		return http.StatusConflict, "already_exists"
	case errors.Is(err, service.ErrStaleSession):
		return http.StatusConflict, "stale"
	case errors.Is(err, context.Canceled):
		return 499, "canceled" // the client went away; nobody reads this
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout"
	case errors.As(err, &redisErr), errors.As(err, &netErr), errors.Is(err, redis.ErrClosed):
		return http.StatusServiceUnavailable, "redis"
	}
	return http.StatusInternalServerError, "internal"
}

// writeError answers {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// writeJSON answers v as JSON (nosniff: never to be read as a script).
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
