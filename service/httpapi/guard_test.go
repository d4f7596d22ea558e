package httpapi_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service/httpapi"
)

// TestCrossSiteWriteRefused reproduces the cross-site write that
// docs/operations.md ("Exposure and browsers") guards against: with no
// token, a page on another site POSTs text/plain (no preflight needed) with its
// Origin. It was 200 and wrote the session; now it is 403 and nothing is
// written, whatever the content type.
func TestCrossSiteWriteRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		for _, ct := range []string{"text/plain", "application/json"} {
			r := send(t, s.request(t, "POST", base+"/pwned", strings.NewReader(`{"owned":true}`),
				"Content-Type", ct, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"))
			require.Equal(t, http.StatusForbidden, r.code, "%s: %s", ct, r.body)
			require.Contains(t, r.errorMessage(t), "https://evil.example")
			s.requireAbsent(t, "pwned", ct)
		}
	})
}

// TestOriginCheck: a request whose Origin is not the server's own or an
// allowed one is 403 for every method, and so is a cross-site browser
// request without Origin unless it is a navigation; the allowed variants
// pass, and allowed origins get CORS.
func TestOriginCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{AllowedOrigins: []string{"https://APP.example:443"}})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/o", map[string]any{"secret": "s3cr3t"}).code)
		own := s.URL // http://127.0.0.1:port
		ctJSON := "application/json"

		refused := []struct {
			name, method, path, body string
			header                   []string
			check                    func(why string)
		}{
			{"foreign origin, create", "POST", base + "/x1", `{}`, []string{"Content-Type", ctJSON, "Origin", "https://evil.example"},
				func(why string) { s.requireAbsent(t, "x1", why) }},
			{"foreign origin, append", "POST", base + "/o/events", `{"author":"a"}`, []string{"Content-Type", ctJSON, "Origin", "https://evil.example"},
				func(why string) { s.requireEvents(t, "o", 0, why) }},
			{"foreign origin, delete", "DELETE", base + "/o", "", []string{"Origin", "https://evil.example"},
				func(why string) { s.requireEvents(t, "o", 0, why) }},
			{"foreign origin, read", "GET", base + "/o", "", []string{"Origin", "https://evil.example"}, nil},
			{"foreign origin, list", "GET", base, "", []string{"Origin", "https://evil.example"}, nil},
			{"foreign origin, dashboard data", "GET", "/api/session?app=app1&user=u1&id=o", "", []string{"Origin", "https://evil.example"}, nil},
			{"opaque origin", "POST", base + "/x2", `{}`, []string{"Content-Type", ctJSON, "Origin", "null"},
				func(why string) { s.requireAbsent(t, "x2", why) }},
			{"own host, other port", "POST", base + "/x3", `{}`, []string{"Content-Type", ctJSON, "Origin", "http://127.0.0.1:1"},
				func(why string) { s.requireAbsent(t, "x3", why) }},
			{"own host, other scheme", "POST", base + "/x4", `{}`, []string{"Content-Type", ctJSON, "Origin", strings.Replace(own, "http:", "https:", 1)},
				func(why string) { s.requireAbsent(t, "x4", why) }},
			{"origin with a path", "POST", base + "/x5", `{}`, []string{"Content-Type", ctJSON, "Origin", own + "/page"},
				func(why string) { s.requireAbsent(t, "x5", why) }},
			{"two origins", "POST", base + "/x6", `{}`, []string{"Content-Type", ctJSON, "Origin", own, "Origin", "https://evil.example"},
				func(why string) { s.requireAbsent(t, "x6", why) }},
			{"foreign preflight", "OPTIONS", base + "/x7", "", []string{"Origin", "https://evil.example", "Access-Control-Request-Method", "POST"}, nil},
			{"cross-site fetch without Origin", "GET", base + "/o", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors"}, nil},
			{"same-site fetch without Origin", "GET", base + "/o", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors"}, nil},
			{"cross-site form without Origin", "POST", base + "/x8", `{}`, []string{"Content-Type", ctJSON, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"},
				func(why string) { s.requireAbsent(t, "x8", why) }},
		}
		for _, c := range refused {
			r := send(t, s.request(t, c.method, c.path, strings.NewReader(c.body), c.header...))
			require.Equal(t, http.StatusForbidden, r.code, "%s: %s", c.name, r.body)
			r.errorMessage(t)
			require.NotContains(t, string(r.body), "s3cr3t", c.name)
			require.Empty(t, r.header.Get("Access-Control-Allow-Origin"), c.name)
			if c.check != nil {
				c.check(c.name)
			}
		}

		accepted := []struct {
			name, method, path, body string
			header                   []string
			id                       string
		}{
			{"own origin", "POST", base + "/a1", `{}`, []string{"Content-Type", ctJSON, "Origin", own, "Sec-Fetch-Site", "same-origin"}, "a1"},
			{"own origin, other case", "POST", base + "/a2", `{}`, []string{"Content-Type", ctJSON, "Origin", strings.ToUpper(own)}, "a2"},
			{"allowed origin", "POST", base + "/a3", `{}`, []string{"Content-Type", ctJSON, "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site"}, "a3"},
			{"no Origin (curl, SDKs)", "POST", base + "/a4", `{}`, []string{"Content-Type", ctJSON}, "a4"},
			{"typed URL", "GET", base + "/o", "", []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate"}, "o"},
			{"link from another site", "GET", base + "/o", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"}, "o"},
		}
		for _, c := range accepted {
			r := send(t, s.request(t, c.method, c.path, strings.NewReader(c.body), c.header...))
			require.Equal(t, http.StatusOK, r.code, "%s: %s", c.name, r.body)
			require.NotNil(t, s.stored(t, c.id), c.name)
		}

		// An allowed origin gets CORS: the preflight, then the answer.
		r := send(t, s.request(t, "OPTIONS", base+"/o/events", nil,
			"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"))
		require.Equal(t, http.StatusNoContent, r.code, "%s", r.body)
		require.Equal(t, "https://app.example", r.header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, r.header.Get("Access-Control-Allow-Methods"), "POST")
		require.Contains(t, r.header.Get("Access-Control-Allow-Headers"), "Authorization")
		require.Contains(t, r.header.Get("Access-Control-Allow-Headers"), "Content-Type")
		s.requireEvents(t, "o", 0, "preflight")
		r = send(t, s.request(t, "POST", base+"/o/events", strings.NewReader(`{"author":"a"}`), "Content-Type", ctJSON, "Origin", "https://app.example"))
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		require.Equal(t, "https://app.example", r.header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, r.header.Get("Access-Control-Expose-Headers"), "ETag")
		s.requireEvents(t, "o", 1, "append from the allowed origin")
		// The server's own pages need no CORS.
		r = send(t, s.request(t, "GET", base+"/o", nil, "Origin", own))
		require.Equal(t, http.StatusOK, r.code)
		require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))

		metrics := string(s.do(t, "GET", "/metrics", nil).body)
		require.Contains(t, metrics, `adksession_errors_total{kind="forbidden",route="origin"} 15`)
	})
}

// TestHostCheck: over loopback only localhost, IP addresses and the
// allowed hosts may be named in Host (a DNS-rebinding page names its own
// domain, and its Origin then matches that Host); elsewhere the allowed
// hosts are enforced when there are some.
func TestHostCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{AllowedHosts: []string{"Sessions.Internal"}})
		require.Equal(t, http.StatusOK, s.do(t, "POST", base+"/h", map[string]any{"secret": "s3cr3t"}).code)
		port := s.Listener.Addr().(*net.TCPAddr).Port
		at := func(host string) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
		withHost := func(method, path, host, body string, header ...string) response {
			req := s.request(t, method, path, strings.NewReader(body), append([]string{"Content-Type", "application/json"}, header...)...)
			req.Host = host
			return send(t, req)
		}

		for i, host := range []string{at("evil.example"), "evil.example", at("localhost.evil.example"), at("sessions.internal.evil.example")} {
			id := "x" + strconv.Itoa(i)
			r := withHost("POST", base+"/"+id, host, `{}`)
			require.Equal(t, http.StatusForbidden, r.code, "%s: %s", host, r.body)
			require.Contains(t, r.errorMessage(t), "Host")
			s.requireAbsent(t, id, host)
			r = withHost("GET", base+"/h", host, "")
			require.Equal(t, http.StatusForbidden, r.code, host)
			require.NotContains(t, string(r.body), "s3cr3t", host)
		}
		// DNS rebinding: evil.example now resolves to 127.0.0.1; the page's
		// requests are same-origin as far as Origin and Host tell.
		r := withHost("POST", base+"/x9", at("evil.example"), `{}`, "Origin", "http://"+at("evil.example"), "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusForbidden, r.code, "%s", r.body)
		s.requireAbsent(t, "x9", "rebinding")
		// Probes and the dashboard are guarded too.
		require.Equal(t, http.StatusForbidden, withHost("GET", "/readyz", at("evil.example"), "").code)
		require.Equal(t, http.StatusForbidden, withHost("GET", "/", at("evil.example"), "").code)

		for i, host := range []string{at("localhost"), at("LocalHost"), "localhost", at("127.0.0.1"), at("::1"), at("sessions.internal"), at("SESSIONS.internal")} {
			id := "a" + strconv.Itoa(i)
			r := withHost("POST", base+"/"+id, host, `{}`, "Origin", "http://"+strings.ToLower(host))
			require.Equal(t, http.StatusOK, r.code, "%s: %s", host, r.body)
			require.NotNil(t, s.stored(t, id), host)
		}

		// Not over loopback: what AllowedHosts names, and IP addresses.
		viaLAN := func(h *httpapi.Handler, host, id string) int {
			req := httptest.NewRequest("POST", base+"/"+id, strings.NewReader(`{}`))
			req.Header.Set("Content-Type", "application/json")
			req.Host = host
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080}))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code
		}
		restricted := httpapi.New(s.svc, httpapi.Options{AllowedHosts: []string{"sessions.example.com"}})
		for id, host := range map[string]string{"lan1": "other.example:8080", "lan2": "localhost:8080"} {
			require.Equal(t, http.StatusForbidden, viaLAN(restricted, host, id), host)
			s.requireAbsent(t, id, host)
		}
		for id, host := range map[string]string{"lan3": "sessions.example.com:8080", "lan4": "192.0.2.1:8080"} {
			require.Equal(t, http.StatusOK, viaLAN(restricted, host, id), host)
			require.NotNil(t, s.stored(t, id), host)
		}
		open := httpapi.New(s.svc, httpapi.Options{})
		require.Equal(t, http.StatusOK, viaLAN(open, "any.example.com", "lan5"))
		require.NotNil(t, s.stored(t, "lan5"))
	})
}

// TestOptionsValidate: origins must be scheme://host[:port], hosts plain
// names; New refuses the rest.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []string{"*", "app.example", "ftp://app.example", "https://app.example/path", "https://user@app.example", "https://app.example?q", "null", ""} {
		opt := httpapi.Options{AllowedOrigins: []string{o}}
		err := opt.Validate()
		require.Error(t, err, "origin %q", o)
		require.PanicsWithValue(t, "httpapi.New: "+err.Error(), func() { httpapi.New(nil, opt) }, "origin %q", o)
	}
	for _, h := range []string{"", "host:8080", "[::1]", "http://host", "a b"} {
		require.Error(t, httpapi.Options{AllowedHosts: []string{h}}.Validate(), "host %q", h)
	}
	ok := httpapi.Options{AllowedOrigins: []string{"https://app.example", "http://localhost:3000/", "HTTPS://APP2.example:443"}, AllowedHosts: []string{"sessions.internal", "Example.COM"}}
	require.NoError(t, ok.Validate())
}
