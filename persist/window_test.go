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
		if s.Dialect() == "postgres" {
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
	if s.Dialect() == "postgres" {
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
