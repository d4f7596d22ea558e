package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// The guard runs before every route. It refuses what a browser sends on
// behalf of a page that is not the server's own (docs/http-api.md,
// "Browsers"):
//
//   - Host: a request that arrived over loopback must name the server as
//     localhost or an IP address (or an Options.AllowedHosts name); with
//     AllowedHosts set, every request must. A DNS-rebinding page names its
//     own domain and is refused.
//   - Origin: a request carrying one must come from the server's own origin
//     or an Options.AllowedOrigins one. Without Origin, a browser request
//     that Sec-Fetch-Site marks as cross-site or same-site is refused unless
//     it is a top-level navigation. Requests from curl and SDKs carry
//     neither header and pass.
//
// Allowed origins get CORS headers and their preflights are answered.

// guard answers the request itself (refusal or preflight) and returns false,
// or returns true to let it through.
func (h *Handler) guard(w http.ResponseWriter, r *http.Request) bool {
	if !h.hostAllowed(r) {
		h.refuse(w, "host", fmt.Sprintf("Host %q is not a name of this server (add it with --allow-host / Options.AllowedHosts)", r.Host))
		return false
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		if crossSite(r) {
			h.refuse(w, "origin", "cross-site request refused (Sec-Fetch-Site: "+r.Header.Get("Sec-Fetch-Site")+")")
			return false
		}
		return true
	}
	origin, err := normalizeOrigin(origins[0])
	switch {
	case len(origins) == 1 && err == nil && origin == ownOrigin(r):
		return true
	case len(origins) == 1 && err == nil && h.origins[origin]:
		return allowCORS(w, r, origin)
	}
	h.refuse(w, "origin", fmt.Sprintf("Origin %q is not allowed: this server's origin is %s (allow others with --allow-origin / Options.AllowedOrigins)", strings.Join(origins, ", "), ownOrigin(r)))
	return false
}

// refuse answers 403, closes the connection after it (as auth does) and
// counts it.
func (h *Handler) refuse(w http.ResponseWriter, check, msg string) {
	h.metrics.errors.WithLabelValues(check, "forbidden").Inc()
	w.Header().Set("Connection", "close")
	writeError(w, http.StatusForbidden, msg)
}

// hostAllowed reports whether the Host header may be served. An IP literal
// cannot be rebound to another address, so it is always allowed, and so is
// an empty Host (an HTTP/1.0 client; browsers always send one).
func (h *Handler) hostAllowed(r *http.Request) bool {
	name := hostName(r.Host)
	if name == "" || h.hosts[name] {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if overLoopback(r) {
		return name == "localhost"
	}
	return len(h.hosts) == 0
}

// hostName is the host of a Host header, lower case, without port or
// brackets.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// overLoopback reports whether the request's connection arrived on a
// loopback address (whatever address the server listens on).
func overLoopback(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ok && addr.IP.IsLoopback()
}

// crossSite reports a browser request, without Origin, from another site
// that is not a top-level navigation (following a link to the dashboard
// from another site is one).
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
	default:
		return false
	}
	navigation := r.Header.Get("Sec-Fetch-Mode") == "navigate" && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	return !navigation
}

// ownOrigin is the origin the request was addressed to, as a browser
// writes it: scheme (https when the connection is TLS) and Host.
func ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + withoutDefaultPort(scheme, strings.ToLower(r.Host))
}

// normalizeOrigin checks that s is an origin (scheme://host[:port], no
// path) and writes it as browsers do: lower case, default port dropped.
func normalizeOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q: scheme must be http or https", s)
	case u.Host == "" || u.User != nil || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%q: want scheme://host[:port] and nothing else", s)
	}
	return u.Scheme + "://" + withoutDefaultPort(u.Scheme, strings.ToLower(u.Host)), nil
}

func withoutDefaultPort(scheme, host string) string {
	if scheme == "http" {
		return strings.TrimSuffix(host, ":80")
	}
	return strings.TrimSuffix(host, ":443")
}

// allowCORS adds the CORS headers of an allowed origin and answers its
// preflight (returning false: nothing more to do).
func allowCORS(w http.ResponseWriter, r *http.Request, origin string) bool {
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		hd.Set("Access-Control-Expose-Headers", "ETag, X-Next-Page-Token, WWW-Authenticate")
		return true
	}
	hd.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
	hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, If-Match")
	hd.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return false
}
