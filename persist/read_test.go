package persist

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// session1000 applies a session of 1000 events, in batches of 100.
func session1000(t testing.TB, s *Store, k base.SessionRef) {
	for from := int64(0); from < 1000; from += 100 {
		u := upsert(k, inc1, from, from+100)
		if err := s.Apply(context.Background(), &Batch{Sessions: []SessionUpsert{u}}); err != nil {
			t.Fatal(err)
		}
	}
}

// seqs returns the Seq of each event, checking that each event is the one
// that was written with that seq.
func seqs(t *testing.T, events []EventRow) []int64 {
	t.Helper()
	out := []int64{}
	for _, e := range events {
		if e.ID != eventID(inc1, e.Seq) || !e.Timestamp.Equal(eventTime(inc1, e.Seq)) || e.Key != skey("s1") {
			t.Fatalf("event %+v does not match seq %d", e, e.Seq)
		}
		out = append(out, e.Seq)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	out := []int64{}
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestLoadSessionWindows(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		session1000(t, s, skey("s1"))
		ts := func(seq int64) time.Time { return eventTime(inc1, seq) }
		for _, tc := range []struct {
			name string
			w    Window
			want []int64
		}{
			{"all", Window{}, seqRange(1, 1000)},
			{"recent 10", Window{NumRecentEvents: 10}, seqRange(991, 1000)},
			{"recent 2000", Window{NumRecentEvents: 2000}, seqRange(1, 1000)},
			{"after is inclusive", Window{After: ts(500)}, seqRange(500, 1000)},
			{"after between events", Window{After: ts(500).Add(time.Nanosecond)}, seqRange(501, 1000)},
			{"after then recent", Window{After: ts(500), NumRecentEvents: 10}, seqRange(991, 1000)},
			{"recent limited by after", Window{After: ts(995), NumRecentEvents: 10}, seqRange(995, 1000)},
			{"after the last event", Window{After: ts(1000).Add(time.Microsecond)}, []int64{}},
			{"after the first event", Window{After: ts(1).Add(-time.Hour)}, seqRange(1, 1000)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ls, err := s.LoadSession(ctx, skey("s1"), tc.w)
				must(t, err)
				same(t, "seqs", seqs(t, ls.Events), tc.want)
				same(t, "rev", ls.Rev, int64(1000))
				same(t, "incarnation", ls.Incarnation, inc1)
				same(t, "state", string(ls.State["count"]), "1000")
				same(t, "update time", ls.UpdateTime, ts(1000))
			})
		}
	})
}

func TestLoadEventsBeforeSeq(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		session1000(t, s, skey("s1"))
		for _, tc := range []struct {
			name      string
			w         Window
			beforeSeq int64
			want      []int64
		}{
			{"no bound", Window{NumRecentEvents: 5}, 0, seqRange(996, 1000)},
			{"before 901, recent 50", Window{NumRecentEvents: 50}, 901, seqRange(851, 900)},
			{"before 901, after 880", Window{After: eventTime(inc1, 880)}, 901, seqRange(880, 900)},
			{"before 3", Window{}, 3, seqRange(1, 2)},
			{"before 1", Window{}, 1, []int64{}},
			{"before past the end", Window{NumRecentEvents: 2}, 5000, seqRange(999, 1000)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				events, err := s.LoadEvents(ctx, skey("s1"), tc.w, tc.beforeSeq)
				must(t, err)
				same(t, "seqs", seqs(t, events), tc.want)
			})
		}
	})
}

func TestLoadNotFound(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 1)}})
		for _, k := range []base.SessionRef{skey("nope"), {App: "app", User: "u2", ID: "s1"}, {App: "other", User: "u1", ID: "s1"}} {
			if _, err := s.LoadSession(ctx, k, Window{}); !errors.Is(err, base.ErrNotFound) {
				t.Errorf("LoadSession(%v): got %v, want ErrNotFound", k, err)
			}
			if _, err := s.LoadEvents(ctx, k, Window{}, 0); !errors.Is(err, base.ErrNotFound) {
				t.Errorf("LoadEvents(%v): got %v, want ErrNotFound", k, err)
			}
		}
		st, v, err := s.LoadUserState(ctx, "app", "nobody")
		must(t, err)
		same(t, "missing user state", len(st), 0)
		same(t, "missing user version", v, StateVersion{})
		st, rev, err := s.LoadAppState(ctx, "app") // the {} row of the first session
		must(t, err)
		if st == nil || len(st) != 0 || rev != 0 {
			t.Fatalf("app state %v rev %d, want {} 0", st, rev)
		}
	})
}

// TestLoadSessionEventsAboveRev: a row whose events outnumber its rev while
// its update_time is the one adksession wrote (an ADK append written over
// by a batch that read the row before ADK committed: simulation seed
// 611470501151) is served with the rev its events are numbered by.
// hydrate.lua refused the newest event above the rev ("event 1 of 4 has
// seq 1, want 0") and the session could not be read back.
func TestLoadSessionEventsAboveRev(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		k := skey("s1")
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 3)}})
		_, err := s.db.Exec(s.d.rebind(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data)
VALUES (?, ?, ?, ?, 'adk-inv', ?, ?)`), eventID(inc1, 4), k.App, k.User, k.ID, formatTime(eventTime(inc1, 4)), `{"id":"adk"}`)
		must(t, err)
		for _, w := range []Window{{}, {NumRecentEvents: 4}, {NumRecentEvents: 10}} {
			ls, err := s.LoadSession(ctx, k, w)
			must(t, err)
			same(t, "seqs", seqs(t, ls.Events), seqRange(1, 4))
			same(t, "rev", ls.Rev, int64(4))
		}
	})
}
