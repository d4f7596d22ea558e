package integration

// The compacted view through Get (docs/design.md, "The compacted view"):
// Get{Compacted: true} returns CompactedView of the whole history, warm and
// cold, and refuses a window.

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestGetCompacted: Get{Compacted: true} of a history with ADK Python's
// compaction events and of one with ADK JS's top-level form returns exactly
// CompactedView of the whole Get's events (fewer than the history), and the
// full state, with Redis holding the whole session, only its newest two
// events (MaxCachedEvents) or none of it (the loader reads Postgres).
// Compacted with NumRecentEvents, After or both is ErrInvalidArgument naming
// them, and the refused Get of a lost session does not load it.
func TestGetCompacted(t *testing.T) {
	t.Parallel()
	const app, user = "app", "u"
	for _, maxCached := range []int{0, 2} {
		t.Run(fmt.Sprintf("MaxCachedEvents %d", maxCached), func(t *testing.T) {
			t.Parallel()
			e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.MaxCachedEvents = maxCached })
			ctx := wbCtx(t)
			for _, h := range testenv.CompactionHistories() {
				t.Run(h.Name, func(t *testing.T) {
					sid := "s-" + h.Name
					created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid, State: map[string]any{"k": 1}})
					require.NoError(t, err)
					appendHistory(t, e.svc, created.Session, h.Events)
					e.flush(e.svc)
					get := func(req service.GetRequest) (*service.Session, error) {
						req.AppName, req.UserID, req.SessionID = app, user, sid
						resp, err := e.svc.Get(ctx, &req)
						if err != nil {
							return nil, err
						}
						return resp.Session, nil
					}
					whole, err := get(service.GetRequest{})
					require.NoError(t, err)
					history := eventsOf(whole)
					want := eventsJSON(t, service.CompactedView(history))
					require.Less(t, len(want), len(history), "the history's view drops events")
					check := func(why string) {
						t.Helper()
						got, err := get(service.GetRequest{Compacted: true})
						require.NoError(t, err, why)
						require.Equal(t, want, eventsJSON(t, eventsOf(got)), "%s: the view of the whole history", why)
						require.Equal(t, stateMap(whole), stateMap(got), "%s: the full state", why)
					}
					check("warm")

					k := e.sessionKeys(app, user, sid)
					require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
					after := history[1].Timestamp
					for _, bad := range []struct {
						req   service.GetRequest
						names []string
					}{
						{service.GetRequest{Compacted: true, NumRecentEvents: 3}, []string{"NumRecentEvents"}},
						{service.GetRequest{Compacted: true, After: after}, []string{"After"}},
						{service.GetRequest{Compacted: true, NumRecentEvents: 3, After: after}, []string{"NumRecentEvents", "After"}},
						{service.GetRequest{Compacted: true, NumRecentEvents: -1}, []string{"NumRecentEvents"}},
					} {
						_, err := get(bad.req)
						require.ErrorIs(t, err, service.ErrInvalidArgument, "%+v", bad.req)
						for _, name := range bad.names {
							require.Contains(t, err.Error(), name)
						}
					}
					n, err := e.rdb.Exists(ctx, k.Session, k.Events).Result()
					require.NoError(t, err)
					require.Zero(t, n, "a refused Get loads nothing into Redis")
					check("cold")
					check("warm again")
				})
			}
		})
	}
}

// epochSeconds is t as ADK's float epoch seconds, to the microsecond.
func epochSeconds(t time.Time) string {
	us := t.UnixMicro()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// appendHistory appends the events of a JSON array in ADK's API form to
// sess and returns them as appended.
func appendHistory(t testing.TB, svc *service.Service, sess *service.Session, raw []byte) []*service.Event {
	t.Helper()
	var events []*service.Event
	require.NoError(t, json.Unmarshal(raw, &events))
	for _, ev := range events {
		require.NoError(t, svc.AppendEvent(wbCtx(t), sess, ev), "event %s", ev.ID)
	}
	return events
}

// eventsJSON is each event's API form with its object members in key
// order: what a view must return, compared whole (a cold read's events come
// back from jsonb, which orders members its own way).
func eventsJSON(t testing.TB, events []*service.Event) []string {
	t.Helper()
	out := make([]string, len(events))
	for i, ev := range events {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		var v any
		require.NoError(t, json.Unmarshal(b, &v))
		if b, err = json.Marshal(v); err != nil {
			require.NoError(t, err)
		}
		out[i] = string(b)
	}
	return out
}

// TestGetCompactedColdReadsByIndex: the compacted view of a 3 000-event
// session Redis lost, whose last compaction covers all but its last 20
// events (one of which answers a call the compaction covers), is read
// through Postgres's indexes (docs/design.md, "The compacted view", "From
// the database"): the cold Get returns CompactedView of the whole history
// (the compaction, the covered call, the 20 events), and the database sends
// it the session's row, its state and the newest MaxCachedEvents events
// (what the cold read puts back into Redis) and the few events the walk
// reads: not the history.
func TestGetCompactedColdReadsByIndex(t *testing.T) {
	t.Parallel()
	const app, user, sid = "app", "u", "long"
	const n, tail, cached = 3000, 20, 50
	base := testenv.FreshDatabase(t)
	e := newWB(t, testenv.RedisURL(t), base, func(c *service.Config) { c.MaxCachedEvents = cached })
	counter, viaCounter := startPGCounter(t, base)
	cfg := e.cfg
	cfg.DatabaseURL, cfg.DisableFlusher = viaCounter, true
	// The walk's own reads: a build of the index would read the history
	// meanwhile (the builder below has them on).
	cfg.DisableIndexBuilds = true
	reader := e.open(cfg)
	cfg.DisableIndexBuilds = false
	builder := e.open(cfg)
	ctx := wbCtx(t)
	created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid})
	require.NoError(t, err)
	sess := created.Session
	first := sess.LastUpdateTime() // the create time
	add := func(inv, content string) {
		t.Helper()
		require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: inv, Author: "agent", Content: json.RawMessage(content)}))
	}
	call := func(id string) string {
		return `{"role":"model","parts":[{"functionCall":{"id":"` + id + `","name":"f","args":{"x":1}}}]}`
	}
	answer := func(id string) string {
		return `{"role":"user","parts":[{"functionResponse":{"id":"` + id + `","name":"f","response":{"ok":true}}}]}`
	}
	for i := range n - tail - 2 {
		inv := fmt.Sprint("inv-", i/10)
		switch i % 10 {
		case 3:
			add(inv, call(fmt.Sprint("c", i)))
		case 4:
			add(inv, answer(fmt.Sprint("c", i-1)))
		default:
			add(inv, fmt.Sprintf(`{"role":"model","parts":[{"text":"event %d"}]}`, i))
		}
	}
	add("inv-open", call("open"))
	last := sess.LastUpdateTime()
	require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: "compaction", Author: "user",
		Actions: service.EventActions{Compaction: json.RawMessage(fmt.Sprintf(
			`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
			epochSeconds(first), epochSeconds(last)))}}))
	add("inv-tail", answer("open"))
	for i := range tail - 1 {
		add("inv-tail", fmt.Sprintf(`{"role":"model","parts":[{"text":"tail %d"}]}`, i))
	}
	e.flush(e.svc)

	whole, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
	require.NoError(t, err)
	history := eventsOf(whole.Session)
	require.Len(t, history, n)
	view := service.CompactedView(history)
	require.Len(t, view, tail+2, "the covered call, the compaction, the 20 events")
	want := eventsJSON(t, view)

	k := e.sessionKeys(app, user, sid)
	require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
	counter.Reset()
	got, err := reader.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, Compacted: true})
	require.NoError(t, err)
	require.Equal(t, want, eventsJSON(t, eventsOf(got.Session)), "the cold view is the warm one")
	rows, statements := counter.Rows(), counter.Statements()
	t.Logf("cold compacted Get of %d events: %d rows from the database in %d statements (%d events put back into Redis)",
		n, rows, statements, cached)
	require.Less(t, rows, int64(cached+2*tail), "the cold view reads the cached tail and the view's events, not the history")
	again, err := reader.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, Compacted: true})
	require.NoError(t, err)
	require.Equal(t, want, eventsJSON(t, eventsOf(again.Session)), "read again, Redis holding the tail")
	require.Empty(t, e.rdb.HGet(ctx, k.Undo, "xok").Val(), "no index built with DisableIndexBuilds")

	// With builds on, the walk has the index built from the whole history in
	// the background, and the next compacted read is the index's: the view
	// lies in the cached tail, so it reads nothing from the database.
	require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.Undo, k.Temp).Err())
	walked, err := builder.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, Compacted: true})
	require.NoError(t, err)
	require.Equal(t, want, eventsJSON(t, eventsOf(walked.Session)), "the walk with builds on")
	waitUntil(t, time.Minute, "the compaction index to be built", func() bool {
		return e.rdb.HGet(ctx, k.Undo, "xok").Val() == "1"
	})
	counter.Reset()
	indexed, err := builder.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, Compacted: true})
	require.NoError(t, err)
	require.Equal(t, want, eventsJSON(t, eventsOf(indexed.Session)), "the view from the built index")
	t.Logf("compacted Get from the built index: %d rows from the database in %d statements", counter.Rows(), counter.Statements())
	require.Zero(t, counter.Statements(), "the index's read asks the database nothing")
}

// TestCompactedViewBesideTheScript: a compacted view's events among the
// session's newest 32 (or as many as its last view used, and a few more)
// are read by ZRANGE beside get.lua, the older ones by the script
// (docs/design.md, "Reads"). For views whose events reach from below that
// boundary to above it, or lie all on one side (tails of 10, 30, 31, 32, 33
// and 60 events after the last compaction, the first of them answering a
// call the compaction covers, so the view also holds an event far below the
// boundary; then each tail grown by 9 events, past what the last view
// used), a warm Get{Compacted: true} returns exactly CompactedView of the
// whole history, with and without the compaction index (the whole history
// read: the index gone).
func TestCompactedViewBesideTheScript(t *testing.T) {
	t.Parallel()
	const app, user, covered = "app", "u", 50
	e := newWB(t, testenv.RedisURL(t), "", func(c *service.Config) { c.DisableIndexBuilds = true })
	ctx := wbCtx(t)
	for _, tail := range []int{10, 30, 31, 32, 33, 60} {
		sid := fmt.Sprint("tail-", tail)
		created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: app, UserID: user, SessionID: sid})
		require.NoError(t, err)
		sess := created.Session
		first := sess.LastUpdateTime()
		add := func(inv, content string) {
			t.Helper()
			require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: inv, Author: "agent", Content: json.RawMessage(content)}))
		}
		add("inv-open", `{"role":"model","parts":[{"functionCall":{"id":"open","name":"f","args":{"x":1}}}]}`)
		for i := range covered {
			add(fmt.Sprint("inv-", i/5), fmt.Sprintf(`{"role":"model","parts":[{"text":"covered %d"}]}`, i))
		}
		require.NoError(t, e.svc.AppendEvent(ctx, sess, &service.Event{InvocationID: "compaction", Author: "user",
			Actions: service.EventActions{Compaction: json.RawMessage(fmt.Sprintf(
				`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
				epochSeconds(first), epochSeconds(sess.LastUpdateTime())))}}))
		add("inv-tail", `{"role":"user","parts":[{"functionResponse":{"id":"open","name":"f","response":{"ok":true}}}]}`)
		for i := range tail - 1 {
			add("inv-tail", fmt.Sprintf(`{"role":"model","parts":[{"text":"tail %d"}]}`, i))
		}
		// check holds a compacted Get to CompactedView of a whole read
		// (n events long).
		check := func(n int, what string) {
			t.Helper()
			whole, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid})
			require.NoError(t, err)
			view := service.CompactedView(eventsOf(whole.Session))
			require.Len(t, view, n, "tail %d: the covered call, the compaction and the tail", tail)
			got, err := e.svc.Get(ctx, &service.GetRequest{AppName: app, UserID: user, SessionID: sid, Compacted: true})
			require.NoError(t, err)
			require.Equal(t, eventsJSON(t, view), eventsJSON(t, eventsOf(got.Session)), "tail %d: %s", tail, what)
		}
		check(tail+2, "the view from the index")
		k := e.sessionKeys(app, user, sid)
		require.Equal(t, "1", e.rdb.HGet(ctx, k.Undo, "xok").Val(), "tail %d: the session has its index", tail)
		// The next view reads as many newest events beside the script as
		// the last one used and a few more (cache.besideCount): a tail grown
		// past that passes its older part through the script.
		for i := range 9 {
			add("inv-tail", fmt.Sprintf(`{"role":"model","parts":[{"text":"grown %d"}]}`, i))
		}
		check(tail+11, "the view from the index, the tail grown by 9")
		check(tail+11, "the same view again")
		require.NoError(t, e.rdb.HDel(ctx, k.Undo, "xok").Err())
		check(tail+11, "the view of the whole history")
	}
}
