package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service/httpapi"
)

// attackPage is a page on another origin that tries, in a real browser,
// what needs no preflight against a server with no token: a text/plain
// POST, a POST of a body with no type, a text/plain form posted into a
// frame, and a read with CORS. Its title reports what it saw.
const attackPage = `<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="API/apps/shop/users/alice/sessions/pwned-form">
<input name='{"owned":' value='true}'></form>
<script>
const api = "API";
const seen = {};
async function attack() {
  for (const [name, init] of [
    ["pwned-text", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: '{"owned":true}'}],
    ["pwned-blob", {method: "POST", mode: "no-cors", body: new Blob(['{"owned":true}'])}],
  ]) {
    try { await fetch(api + "/apps/shop/users/alice/sessions/" + name, init); seen[name] = "sent"; } catch (e) { seen[name] = String(e); }
  }
  try { const r = await fetch(api + "/apps/shop/users/alice/sessions/victim"); seen.read = await r.text(); } catch (e) { seen.read = "blocked"; }
  const frame = document.querySelector("iframe");
  await new Promise((done) => { frame.onload = done; document.getElementById("f").submit(); });
  seen.form = "sent";
  document.title = "done " + JSON.stringify(seen);
}
attack();
</script></body></html>`

// TestCrossSitePageInChromium runs a cross-site attack (docs/operations.md,
// "Exposure and browsers") from a page on another origin in headless
// Chromium against a server without a token: every
// request reaches the server and is refused by the Origin check (the
// server counts them), nothing is written, and the page reads nothing.
func TestCrossSitePageInChromium(t *testing.T) {
	chromium := testenv.ChromiumPath(t)
	t.Parallel()
	s := newAPIServer(t, "redis://"+miniredis.RunT(t).Addr()+"/0", httpapi.Options{})
	require.Equal(t, http.StatusOK, s.do(t, "POST", "/apps/shop/users/alice/sessions/victim", map[string]any{"secret": "s3cr3t"}).code)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(strings.ReplaceAll(attackPage, "API", s.URL)))
	}))
	t.Cleanup(evil.Close)
	require.NotEqual(t, evil.URL, s.URL)

	browser := newBrowser(t, chromium)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(evil.URL+"/")))
	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.title.startsWith("done ")`))
	require.NoError(t, err)
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	var seen map[string]string
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(title, "done ")), &seen), title)
	require.Equal(t, map[string]string{"pwned-text": "sent", "pwned-blob": "sent", "read": "blocked", "form": "sent"}, seen)

	for _, id := range []string{"pwned-text", "pwned-blob", "pwned-form"} {
		r := s.do(t, "GET", "/apps/shop/users/alice/sessions/"+id, nil)
		require.Equal(t, http.StatusNotFound, r.code, "%s was written: %s", id, r.body)
	}
	metrics := string(s.do(t, "GET", "/metrics", nil).body)
	refused := regexp.MustCompile(`adksession_errors_total\{kind="forbidden",route="origin"\} (\d+)`).FindStringSubmatch(metrics)
	require.NotNil(t, refused, "no request was refused by the Origin check")
	require.Equal(t, "4", refused[1], "the Origin check refused the page's 4 requests")
}
