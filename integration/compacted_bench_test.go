package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// The session of BenchmarkCompactedView: compactedHistory events, the last
// compactedTail of them after its last compaction.
const compactedHistory, compactedTail = 100000, 20

// BenchmarkCompactedView reads a 100 000-event session (~1 KiB an event)
// whose last compaction (ADK Python's form) covers every event before it
// and is followed by 20 events, two ways, alternately in one loop:
// Get{Compacted: true} (the compaction and the 20 events) and
// Get{NumRecentEvents: 20} (the 20 events). It reports both means (ms) and
// ratio = view ÷ window. The view is read from the compaction index
// (docs/design.md, "The compacted view"): O(log n + k), so the ratio does
// not grow with the history.
func BenchmarkCompactedView(b *testing.B) {
	svc, sid := filledSession(b, "compacted", func(svc *service.Service, created *service.Session) {
		prefill(b, svc, created.ID(), compactedHistory-compactedTail-1)
		ctx := context.Background()
		resp, err := svc.Get(ctx, &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: created.ID(), NumRecentEvents: 1})
		require.NoError(b, err)
		sess := resp.Session
		compaction := &service.Event{InvocationID: "compaction", Author: "user", Actions: service.EventActions{Compaction: json.RawMessage(fmt.Sprintf(
			`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
			epochSeconds(created.LastUpdateTime()), epochSeconds(sess.Events().At(0).Timestamp)))}}
		require.NoError(b, svc.AppendEvent(ctx, sess, compaction))
		for i := range compactedTail {
			require.NoError(b, svc.AppendEvent(ctx, sess, benchEvent(benchContent(), "inv-tail", i)))
		}
	})
	ctx := context.Background()
	read := func(req *service.GetRequest, want int, lat *[]time.Duration) *service.Session {
		start := time.Now()
		resp, err := svc.Get(ctx, req)
		*lat = append(*lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if got := resp.Session.Events().Len(); got != want {
			b.Fatalf("Get %+v returned %d events, want %d", req, got, want)
		}
		return resp.Session
	}
	viewReq := &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, Compacted: true}
	windowReq := &service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: compactedTail}
	var lv, lw []time.Duration
	view, window := read(viewReq, compactedTail+1, &lv), read(windowReq, compactedTail, &lw)
	require.NotEmpty(b, view.Events().At(0).Actions.Compaction, "the view starts with the compaction")
	require.Equal(b, slices.Collect(window.Events().All())[0].ID, view.Events().At(1).ID, "then the window's events")
	lv, lw = nil, nil
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			read(viewReq, compactedTail+1, &lv)
			read(windowReq, compactedTail, &lw)
		} else {
			read(windowReq, compactedTail, &lw)
			read(viewReq, compactedTail+1, &lv)
		}
	}
	b.ReportMetric(mean(lv)/1e3, "view-ms")
	b.ReportMetric(mean(lw)/1e3, "window-ms")
	b.ReportMetric(mean(lv)/mean(lw), "ratio")
}
