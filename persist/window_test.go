package persist

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestEventWindowUsesIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		k := skey("s1")
		session1000(t, s, k)
		if s.d.name == "postgres" {
			_, err := s.db.Exec(`ANALYZE events`)
			must(t, err)
		}
		for _, w := range []struct {
			name  string
			after time.Time
			limit int
			skip  int64
		}{
			{"all", time.Time{}, 0, 0},
			{"recent", time.Time{}, 10, 0},
			{"after", eventTime(inc1, 990), 0, 0},
			{"after and recent, before seq", eventTime(inc1, 500), 10, 100},
		} {
			t.Run(w.name, func(t *testing.T) {
				q, args := s.d.eventsQuery(k, w.after, w.limit, w.skip)
				plan := explain(t, s, q, args)
				t.Log(plan)
				if !strings.Contains(plan, "idx_events_app_user_session_ts") ||
					strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "Sort") {
					t.Fatalf("plan does not walk idx_events_app_user_session_ts in order:\n%s", plan)
				}
			})
		}
	})
}

// explain returns the query plan of q. On Postgres sequential and bitmap
// scans are disabled: in a test table that holds little more than the one
// session, the planner would rightly prefer reading it all and sorting,
// which would hide a missing index.
func explain(t *testing.T, s *Store, q string, args []any) string {
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	must(t, err)
	defer tx.Rollback()
	prefix := "EXPLAIN QUERY PLAN "
	if s.d.name == "postgres" {
		prefix = "EXPLAIN "
		_, err := tx.Exec(`SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off`)
		must(t, err)
	}
	rows, err := tx.Query(prefix+q, args...)
	must(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	must(t, err)
	var plan []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		must(t, rows.Scan(ptrs...))
		plan = append(plan, fmt.Sprint(vals[len(vals)-1]))
	}
	must(t, rows.Err())
	return strings.Join(plan, "\n")
}

// TestLoadEventsAt: the events of a compacted view older than the cached
// tail, by time: points and open ranges (one without a lower bound), oldest
// first, a point inside a range once, a time without an event nothing; and
// every part of the query is a point or range read of
// idx_events_app_user_session_ts bounded by the time, no scan of the
// session's events.
func TestLoadEventsAt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		k := skey("s1")
		session1000(t, s, k)
		session1000(t, s, skey("other"))
		if s.d.name == "postgres" {
			_, err := s.db.Exec(`ANALYZE events`)
			must(t, err)
		}
		at := []time.Time{eventTime(inc1, 3), eventTime(inc1, 500), eventTime(inc1, 12), eventTime(inc1, 700).Add(time.Microsecond)}
		ranges := []TimeRange{{Before: eventTime(inc1, 3)}, {After: eventTime(inc1, 10), Before: eventTime(inc1, 14)},
			{After: eventTime(inc1, 997), Before: eventTime(inc1, 1000)}}
		rows, err := s.LoadEventsAt(context.Background(), k, at, ranges)
		must(t, err)
		var got []string
		for _, r := range rows {
			got = append(got, r.ID)
			if r.Key != k || r.Seq != 0 {
				t.Fatalf("row %s: key %v, seq %d", r.ID, r.Key, r.Seq)
			}
		}
		var want []string
		for _, seq := range []int64{1, 2, 3, 11, 12, 13, 500, 998, 999} {
			want = append(want, eventID(inc1, seq))
		}
		same(t, "events", got, want)

		q, args := s.d.eventsAtQuery(k, at, ranges)
		plan := explain(t, s, q, args)
		t.Log(plan)
		for _, line := range strings.Split(plan, "\n") {
			scan := strings.Contains(line, "Scan") || strings.Contains(line, "SCAN") || strings.Contains(line, "SEARCH")
			// Each index read is bounded by the time, not the whole session's.
			bounded := !strings.Contains(line, "Index Cond") && !strings.Contains(line, "SEARCH") || strings.Contains(line, "timestamp")
			if scan && (!strings.Contains(line, "idx_events_app_user_session_ts") || strings.Contains(line, "Bitmap")) || !bounded {
				t.Fatalf("plan reads the events other than through idx_events_app_user_session_ts:\n%s", plan)
			}
		}
		if strings.Count(plan, "idx_events_app_user_session_ts") < 4 {
			t.Fatalf("plan does not read each part through idx_events_app_user_session_ts:\n%s", plan)
		}
	})
}
