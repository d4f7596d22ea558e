package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// The session of BenchmarkCompactedView: compactedHistory events, the last
// compactedTail of them after its last compaction.
const compactedHistory, compactedTail = 100000, 20

// BenchmarkCompactedView reads a 100 000-event session (~1 KiB an event)
// whose last compaction (ADK Python's form) covers every event before it
// and is followed by 20 events, three ways, in turn in one loop:
// Get{Compacted: true} (the compaction and the 20 events),
// Get{NumRecentEvents: 20} (the 20 events) and Get{NumRecentEvents: 21}
// (the same 21 events as the view, read as a window). It reports the means
// (ms), ratio = view ÷ the 20-event window and ratio-same = view ÷ the
// 21-event window: what ADK's rules and the index cost beyond reading the
// events the view returns. The view is read from the compaction index
// (docs/design.md, "The compacted view"): O(log n + k), so the ratio does
// not grow with the history.
func BenchmarkCompactedView(b *testing.B) {
	svc, sid := filledSession(b, "compacted", func(svc *service.Service, created *service.Session) {
		fillCompacted(b, svc, created, compactedHistory)
	})
	benchViewVsWindow(b, svc, sid, nil)
}

// BenchmarkCompactedViewCold is BenchmarkCompactedView of a session Redis
// lost before each read (its keys deleted, the timer stopped): both reads
// are cold reads from Postgres, which put the session and its newest
// MaxCachedEvents (1 000) events back into Redis; the view's older part is
// read through Postgres's indexes (docs/design.md, "The compacted view",
// "From the database"). -compacted.cold sets the history's length.
func BenchmarkCompactedViewCold(b *testing.B) {
	benchCompactedViewCold(b, testenv.FreshDatabase(b))
}

// BenchmarkCompactedViewColdSQLite is BenchmarkCompactedViewCold on SQLite:
// the view's older part is read through migration 007's indexes and
// call-id table.
func BenchmarkCompactedViewColdSQLite(b *testing.B) {
	benchCompactedViewCold(b, "sqlite://"+filepath.Join(b.TempDir(), "adksession.db"))
}

func benchCompactedViewCold(b *testing.B, dbURL string) {
	// Builds off: every read is a walk, and no build of the index reads the
	// history meanwhile (Config.DisableIndexBuilds).
	e := newWB(b, testenv.RedisURL(b), dbURL, func(c *service.Config) {
		c.ConcurrentAppends, c.DisableIndexBuilds = true, true
	})
	ctx := context.Background()
	created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: historyApp, UserID: historyUser, SessionID: "cold"})
	require.NoError(b, err)
	start := time.Now()
	fillCompacted(b, e.svc, created.Session, *coldHistory)
	e.flush(e.svc)
	b.Logf("filled and flushed %d events in %v", *coldHistory, time.Since(start).Round(time.Millisecond))
	k := e.sessionKeys(historyApp, historyUser, "cold")
	benchViewVsWindow(b, e.svc, "cold", func() {
		b.StopTimer()
		require.NoError(b, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
		b.StartTimer()
	})
}

var coldHistory = flag.Int("compacted.cold", compactedHistory, "BenchmarkCompactedViewCold: events in the session")

// fillCompacted appends to created n-compactedTail-1 benchmark events, a
// compaction (ADK Python's form) covering them all and compactedTail events.
func fillCompacted(b *testing.B, svc *service.Service, created *service.Session, n int) {
	prefill(b, svc, created.ID(), n-compactedTail-1)
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
}

// benchViewVsWindow reads session sid of historyApp/historyUser as
// Get{Compacted: true}, as Get{NumRecentEvents: compactedTail} and as
// Get{NumRecentEvents: compactedTail + 1} (the view's events as a window),
// in turn, the first of the three moving on each round, each after before
// (nil: nothing), and reports the means (ms), ratio = view ÷ window and
// ratio-same = view ÷ the window of the view's length.
func benchViewVsWindow(b *testing.B, svc *service.Service, sid string, before func()) {
	ctx := context.Background()
	read := func(req *service.GetRequest, want int, lat *[]time.Duration) *service.Session {
		if before != nil {
			before()
		}
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
	var lv, lw, ls []time.Duration
	reads := []func() *service.Session{
		func() *service.Session {
			return read(&service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, Compacted: true}, compactedTail+1, &lv)
		},
		func() *service.Session {
			return read(&service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: compactedTail}, compactedTail, &lw)
		},
		func() *service.Session {
			return read(&service.GetRequest{AppName: historyApp, UserID: historyUser, SessionID: sid, NumRecentEvents: compactedTail + 1}, compactedTail+1, &ls)
		},
	}
	view, window, same := reads[0](), reads[1](), reads[2]()
	require.NotEmpty(b, view.Events().At(0).Actions.Compaction, "the view starts with the compaction")
	require.Equal(b, slices.Collect(window.Events().All())[0].ID, view.Events().At(1).ID, "then the window's events")
	require.Equal(b, sessionEventIDs(same), sessionEventIDs(view), "the window of the view's length reads the view's events")
	lv, lw, ls = nil, nil, nil
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range reads {
			reads[(i+j)%len(reads)]()
		}
	}
	b.ReportMetric(mean(lv)/1e3, "view-ms")
	b.ReportMetric(mean(lw)/1e3, "window-ms")
	b.ReportMetric(mean(lv)/mean(lw), "ratio")
	b.ReportMetric(mean(lv)/mean(ls), "ratio-same")
}

// sessionEventIDs is the ids of s's events, in order.
func sessionEventIDs(s *service.Session) []string {
	var ids []string
	for e := range s.Events().All() {
		ids = append(ids, e.ID)
	}
	return ids
}
