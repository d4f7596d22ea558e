package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service/httpapi"
)

// TestOpsDashboardInChromium loads the dashboard in headless Chromium
// against a server with a token, real Redis and Postgres (flusher off, so
// the backlog grows), appends sampled every 100 ms: after the token is
// entered, the six history charts draw lines from samples with data, the
// dead-letter panel lists two dead letters, Retry puts one back on its
// shard's change log and Drop (confirmed) forgets the other. A screenshot
// goes to the test's artifact directory (go test -artifacts keeps it).
func TestOpsDashboardInChromium(t *testing.T) {
	chromium := testenv.ChromiumPath(t)
	t.Parallel()
	s := newOpsServer(t, httpapi.Options{AuthToken: "s3cret", HistoryInterval: 100 * time.Millisecond})
	shardA := s.deadLetterCreate(t, "shop", "alice", "a1")
	shardB := s.deadLetterCreate(t, "shop", "bob", "b1")
	require.Equal(t, http.StatusOK, s.do(t, "POST", "/apps/shop/users/carol/sessions/busy", nil).code)
	appendSome := func(n int) {
		for i := range n {
			r := s.do(t, "POST", "/apps/shop/users/carol/sessions/busy/events", map[string]any{
				"author": "model", "invocationId": fmt.Sprint("inv-", i/5),
				"content": map[string]any{"parts": []any{map[string]any{"text": "reply"}}}})
			require.Equal(t, http.StatusOK, r.code, "%s", r.body)
		}
	}
	appendSome(40)

	browser := newBrowser(t, chromium)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(s.URL+"/")))
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}
	poll := func(js string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 30*time.Second)
		defer cancel()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js))
		require.NoError(t, err, js)
	}
	do(chromedp.WaitVisible(`#token-form`), chromedp.SetValue(`#token`, "s3cret"), chromedp.Click(`#token-form button`))

	// Every chart has samples with data and draws them.
	for _, id := range []string{"appends", "latency", "lag", "backlog", "dead", "memory"} {
		if id == "latency" || id == "appends" {
			appendSome(10) // appends in the intervals the page samples now
		}
		poll(fmt.Sprintf(`(() => { const f = document.getElementById("chart-%s");
			return f && Number(f.dataset.points) > 0 && f.querySelectorAll("svg polyline.series, svg circle.dot").length > 0; })()`, id))
	}
	poll(`document.querySelector("#chart-dead .now").textContent === "2"`)
	poll(`document.querySelector("#chart-latency svg .p99") !== null`)

	// The dead letters, with their sessions and reasons.
	do(chromedp.WaitVisible(`#dead-letters tr[data-session="a1"]`), chromedp.WaitVisible(`#dead-letters tr[data-session="b1"]`))
	rowText := func(sid string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Text(`#dead-letters tr[data-session="`+sid+`"]`))
		require.NoError(t, err)
		return v
	}
	require.Contains(t, rowText("a1"), "shop / alice / a1")
	require.Contains(t, rowText("a1"), "refused by the test: a1")
	require.Contains(t, rowText("b1"), "create · session")

	ctx, cancel := context.WithTimeout(browser, 30*time.Second)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	cancel()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(png), "\x89PNG"), "not a PNG")
	shot := filepath.Join(t.ArtifactDir(), "ops-dashboard.png")
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("ADKSESSION_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ops-dashboard.png"), png, 0o644))
	}

	// Retry: the row goes, the change is back on its shard's change log.
	do(chromedp.Click(`#dead-letters tr[data-session="a1"] button.retry`))
	poll(`document.querySelector('#dead-letters tr[data-session="a1"]') === null`)
	require.True(t, s.logHas(t, shardA, "a1"), "retried from the page, but not on the change log")

	// Drop asks for a second click, then forgets the dead letter.
	do(chromedp.Click(`#dead-letters tr[data-session="b1"] button.drop`))
	poll(`document.querySelector('#dead-letters tr[data-session="b1"] button.drop').textContent === "Confirm drop"`)
	require.Equal(t, int64(1), s.deadCount(t, shardB), "dropped on the first click")
	// A refresh of the list between the two clicks (the page refreshes it
	// while dead letters are shown) keeps the row asking for the second one.
	poll(`(() => { window.armedDrop = document.querySelector('#dead-letters tr[data-session="b1"] button.drop');
		refreshDeadLetters(); return true; })()`)
	poll(`(() => { const b = document.querySelector('#dead-letters tr[data-session="b1"] button.drop');
		return b !== null && b !== window.armedDrop; })()`) // the row drawn again
	poll(`document.querySelector('#dead-letters tr[data-session="b1"] button.drop').textContent === "Confirm drop"`)
	do(chromedp.Click(`#dead-letters tr[data-session="b1"] button.drop`))
	poll(`document.getElementById("dead-panel").hidden`)
	require.Zero(t, s.deadCount(t, shardB))
	require.False(t, s.logHas(t, shardB, "b1"), "a dropped dead letter went back to the change log")
}

// deadCount is the length of a shard's dead-letter list.
func (s *opsServer) deadCount(t *testing.T, shard int) int64 {
	t.Helper()
	n, err := s.rdb.LLen(context.Background(), s.keys.ShardKeys(shard).Dead).Result()
	require.NoError(t, err)
	return n
}
