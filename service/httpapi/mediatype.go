package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// checkMediaType refuses (415) a request body that is not JSON: a POST, PUT
// or PATCH must say "Content-Type: application/json" (parameters ignored
// but charset, which must be utf-8). With no Content-Type it must have no
// body at all: ADK's web UI creates a session with an empty POST. A page on
// another site can send text/plain or form bodies without asking; it cannot
// send application/json without a CORS preflight, which only allowed
// origins pass.
func checkMediaType(r *http.Request) error {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	types := r.Header.Values("Content-Type")
	switch len(types) {
	case 0:
		return emptyBody(r)
	case 1:
	default:
		return unsupported("more than one Content-Type")
	}
	mt, params, err := mime.ParseMediaType(types[0])
	if err != nil || mt != "application/json" {
		return unsupported("Content-Type " + types[0] + ": the request body must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return unsupported("Content-Type " + types[0] + ": JSON is UTF-8")
	}
	return nil
}

// emptyBody refuses a body sent without Content-Type. A body of unknown
// length is read for one byte: nothing there is no body.
func emptyBody(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	if r.ContentLength < 0 {
		var b [1]byte
		n, err := io.ReadFull(r.Body, b[:])
		if n == 0 && errors.Is(err, io.EOF) {
			return nil
		}
		if n == 0 {
			return badRequest("request body: " + err.Error())
		}
	}
	return unsupported("a request body needs Content-Type: application/json")
}

func unsupported(msg string) error { return &httpError{http.StatusUnsupportedMediaType, msg} }
