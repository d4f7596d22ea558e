package httpapi_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service/httpapi"
)

// newBrowser starts a headless Chromium, stopped when the test ends. The
// first chromedp.Do on it starts it and must not carry a timeout (it would
// stop the browser); give each later step one.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.WindowSize(1400, 1000),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	browser, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	return browser
}

// TestDashboardInChromium loads the dashboard in a real headless Chromium
// against a server with sessions, and checks what it shows: the overview
// numbers, the list of sessions, one session's state and events (a
// rewound one marked), a live update and a search.
func TestDashboardInChromium(t *testing.T) {
	chromium := testenv.ChromiumPath(t)
	t.Parallel()
	s := newAPIServer(t, "redis://"+miniredis.RunT(t).Addr()+"/0", httpapi.Options{
		FlushStats: func(context.Context) (httpapi.FlushStats, error) {
			return httpapi.FlushStats{Lag: 1500 * time.Millisecond, Backlog: 42, DeadLetters: 0}, nil
		},
	})
	for _, id := range []string{"dash-1", "dash-2", "dash-3"} {
		require.Equal(t, http.StatusOK, s.do(t, "POST", "/apps/shop/users/alice/sessions/"+id, map[string]any{"color": "teal-" + id}).code)
	}
	appendEvent := func(id, inv, text string) {
		r := s.do(t, "POST", "/apps/shop/users/alice/sessions/dash-2/events", map[string]any{
			"id": id, "author": "model", "invocationId": inv,
			"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}},
		})
		require.Equal(t, http.StatusOK, r.code, "%s", r.body)
	}
	appendEvent("ev-hello", "inv-1", "hello dashboard")
	appendEvent("ev-undone", "undone", "this was rewound")
	r := s.do(t, "POST", "/apps/shop/users/alice/sessions/dash-2/rewind", map[string]any{"beforeInvocationId": "undone"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.body)

	browser := newBrowser(t, chromium)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(s.URL+"/")))
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		require.NoError(t, err, sel)
		return v
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}

	do(chromedp.WaitVisible(`#sessions tr[data-id="dash-3"]`))
	list := text(`#sessions`)
	for _, id := range []string{"dash-1", "dash-2", "dash-3"} {
		require.Contains(t, list, id)
	}
	pctx, pcancel := context.WithTimeout(browser, 30*time.Second)
	_, err := chromedp.Run(pctx, chromedp.Poll[bool](`document.getElementById("flush-backlog").textContent === "42"`))
	pcancel()
	require.NoError(t, err)
	require.Equal(t, "1.5 s", text(`#flush-lag`))
	require.Equal(t, "0", text(`#flush-dead`))

	do(chromedp.Click(`#sessions tr[data-id="dash-2"]`), chromedp.WaitVisible(`#events li[data-id="ev-hello"]`))
	state := text(`#state`)
	require.Contains(t, state, "color")
	require.Contains(t, state, `"teal-dash-2"`)
	events := text(`#events`)
	require.Contains(t, events, "hello dashboard")
	require.Contains(t, text(`#events li[data-id="ev-undone"]`), "rewound")
	actx2, acancel := context.WithTimeout(browser, 30*time.Second)
	class, err := chromedp.Run(actx2, chromedp.AttributeValue(`#events li[data-id="ev-undone"]`, "class"))
	acancel()
	require.NoError(t, err)
	require.Equal(t, "rewound", class.Value)
	require.NotContains(t, text(`#events li[data-id="ev-hello"]`), "rewound")

	// Live: an event appended now shows up without a reload.
	appendEvent("ev-live", "inv-2", "arrived later")
	do(chromedp.WaitVisible(`#events li[data-id="ev-live"]`))
	require.Contains(t, text(`#events li[data-id="ev-live"]`), "arrived later")

	// Search by app and user.
	require.Equal(t, http.StatusOK, s.do(t, "POST", "/apps/shop/users/bob/sessions/bob-1", nil).code)
	do(chromedp.SetValue(`#search-app`, "shop"), chromedp.SetValue(`#search-user`, "bob"), chromedp.Click(`#search button[type=submit]`),
		chromedp.WaitVisible(`#sessions[data-view="search"] tr[data-id="bob-1"]`))
	found := text(`#sessions`)
	require.Contains(t, found, "bob-1")
	require.NotContains(t, found, "dash-1")

	do(chromedp.Click(`#search-clear`), chromedp.WaitVisible(`#sessions[data-view="recent"] tr[data-id="dash-2"]`),
		chromedp.Click(`#sessions tr[data-id="dash-2"]`), chromedp.WaitVisible(`#events li[data-id="ev-live"]`))
	sctx, scancel := context.WithTimeout(browser, 30*time.Second)
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	scancel()
	require.NoError(t, err)
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	require.True(t, strings.HasPrefix(string(png), "\x89PNG"), "not a PNG")
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("ADKSESSION_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644))
	}
}
