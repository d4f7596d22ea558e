package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service/httpapi"
)

// TestMediaType: a body that is not application/json is 415 on every route
// that takes one, and nothing is written; JSON with any spelling of the
// type, and an empty create without Content-Type (ADK's web UI), pass.
func TestMediaType(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/m", map[string]any{"k": "v"}).code)
		r := s.do(t, "POST", base+"/m/events", map[string]any{"author": "a", "invocationId": "i1"})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		state := `{"k":"v"}`
		event := `{"author":"a","invocationId":"i2"}`
		chunked := func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) }

		refused := []struct {
			name, method, path string
			body               io.Reader
			header             []string
			check              func(why string)
		}{
			{"create with id, text/plain", "POST", base + "/x1", strings.NewReader(state), []string{"Content-Type", "text/plain"},
				func(why string) { s.requireAbsent(t, "x1", why) }},
			{"create, text/plain", "POST", base, strings.NewReader(`{"sessionId":"x2"}`), []string{"Content-Type", "text/plain;charset=UTF-8"},
				func(why string) { s.requireAbsent(t, "x2", why) }},
			{"create, form", "POST", base, strings.NewReader("sessionId=x3"), []string{"Content-Type", "application/x-www-form-urlencoded"},
				func(why string) { s.requireAbsent(t, "x3", why) }},
			{"create, multipart", "POST", base + "/x4", strings.NewReader("--b\r\n\r\n{}\r\n--b--\r\n"), []string{"Content-Type", "multipart/form-data; boundary=b"},
				func(why string) { s.requireAbsent(t, "x4", why) }},
			{"create with id, no Content-Type", "POST", base + "/x5", strings.NewReader(state), nil,
				func(why string) { s.requireAbsent(t, "x5", why) }},
			{"create with id, no Content-Type, chunked", "POST", base + "/x6", chunked(state), nil,
				func(why string) { s.requireAbsent(t, "x6", why) }},
			{"create with id, another charset", "POST", base + "/x7", strings.NewReader(state), []string{"Content-Type", "application/json; charset=iso-8859-1"},
				func(why string) { s.requireAbsent(t, "x7", why) }},
			{"create with id, a JSON-like type", "POST", base + "/x8", strings.NewReader(state), []string{"Content-Type", "application/json-seq"},
				func(why string) { s.requireAbsent(t, "x8", why) }},
			{"create with id, two types", "POST", base + "/x9", strings.NewReader(state), []string{"Content-Type", "application/json", "Content-Type", "text/plain"},
				func(why string) { s.requireAbsent(t, "x9", why) }},
			{"create with id, malformed type", "POST", base + "/x10", strings.NewReader(state), []string{"Content-Type", "application/json; charset"},
				func(why string) { s.requireAbsent(t, "x10", why) }},
			{"create with id, empty body, text/plain", "POST", base + "/x11", nil, []string{"Content-Type", "text/plain"},
				func(why string) { s.requireAbsent(t, "x11", why) }},
			{"append, text/plain", "POST", base + "/m/events", strings.NewReader(event), []string{"Content-Type", "text/plain"},
				func(why string) { s.requireEvents(t, "m", 1, why) }},
			{"append, no Content-Type", "POST", base + "/m/events", chunked(event), nil,
				func(why string) { s.requireEvents(t, "m", 1, why) }},
			{"patch, text/plain", "PATCH", base + "/m", strings.NewReader(`{"stateDelta":{"k":"w"}}`), []string{"Content-Type", "text/plain"},
				func(why string) {
					s.requireEvents(t, "m", 1, why)
					v, _ := s.stored(t, "m").State().Get("k")
					require.Equal(t, "v", v, why)
				}},
			{"rewind, text/plain", "POST", base + "/m/rewind", strings.NewReader(`{"beforeInvocationId":"i1"}`), []string{"Content-Type", "text/plain"},
				func(why string) { s.requireEvents(t, "m", 1, why) }},
		}
		for _, c := range refused {
			r := send(t, s.request(t, c.method, c.path, c.body, c.header...))
			require.Equal(t, http.StatusUnsupportedMediaType, r.code, "%s: %s", c.name, r.body)
			r.errorMessage(t)
			c.check(c.name)
		}
		metrics := string(s.do(t, "GET", "/metrics", nil).body)
		require.Contains(t, metrics, `adksession_errors_total{kind="unsupported_media_type",route="create"} 11`)

		accepted := []struct {
			name, method, path string
			body               io.Reader
			header             []string
			id                 string
		}{
			{"JSON, type spelled otherwise", "POST", base + "/a1", strings.NewReader(state), []string{"Content-Type", "Application/JSON; Charset=\"UTF-8\""}, "a1"},
			{"JSON, chunked", "POST", base + "/a2", chunked(state), []string{"Content-Type", "application/json"}, "a2"},
			{"no body, no Content-Type (ADK's web UI)", "POST", base + "/a3", nil, nil, "a3"},
			{"no body, JSON", "POST", base + "/a4", nil, []string{"Content-Type", "application/json"}, "a4"},
		}
		for _, c := range accepted {
			r := send(t, s.request(t, c.method, c.path, c.body, c.header...))
			require.Equal(t, http.StatusOK, r.code, "%s: %s", c.name, r.body)
			require.NotNil(t, s.stored(t, c.id), c.name)
		}
		v, _ := s.stored(t, "a1").State().Get("k")
		require.Equal(t, "v", v)
		// An empty chunked body without Content-Type is no body.
		require.Equal(t, http.StatusOK, s.raw(t, "POST "+base+"/a5 HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"))
		require.NotNil(t, s.stored(t, "a5"))
		require.Equal(t, http.StatusUnsupportedMediaType, s.raw(t, "POST "+base+"/a6 HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n"))
		s.requireAbsent(t, "a6", "chunked body without Content-Type")
	})
}
