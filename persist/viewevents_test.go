package persist

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestLoadViewEvents: the compacted view's lookups (Postgres's migration
// 006, SQLite's 007): the marked events (ADK Python's actions.compaction, ADK
// JS's is_compacted in either spelling, an isolation scope, a rewind) older
// than a bound, the first event of each invocation, the events calling and
// answering ids (snake_case and ADK JS's camelCase content), each once,
// oldest first; and each part of the query is a read of one index, no scan
// of the session's events.
func TestLoadViewEvents(t *testing.T) {
	eachBackend(t, testLoadViewEvents)
}

func testLoadViewEvents(t *testing.T, b backend) {
	s := migrated(t, b)
	ctx := context.Background()
	k := skey("s1")
	u := upsert(k, inc1, 0, 1000)
	set := func(seq int64, data string) { u.Events[seq-1].Data = []byte(data) }
	set(10, `{"author":"user","actions":{"compaction":{"start_timestamp":1,"end_timestamp":2,"compacted_content":{"parts":[]}}}}`)
	set(20, `{"author":"user","isCompacted":true}`)
	set(30, `{"author":"user","is_compacted":true,"end_time":5}`)
	set(40, `{"author":"user","isolation_scope":"task"}`)
	set(50, `{"author":"user","actions":{"rewind_before_invocation_id":"inv-3"}}`)
	set(60, `{"author":"model","content":{"parts":[{"function_call":{"id":"a","name":"f"}}]}}`)
	set(61, `{"author":"model","content":{"parts":[{"text":"x"},{"functionCall":{"id":"b","name":"f"}}]}}`)
	set(62, `{"author":"user","content":{"parts":[{"function_response":{"id":"a","name":"f"}}]}}`)
	set(63, `{"author":"user","content":{"parts":[{"functionResponse":{"id":"b","name":"f"}}]}}`)
	set(64, `{"author":"model","content":{"parts":[{"function_call":{"id":"c","name":"f"}},{"function_call":{"id":"d","name":"f"}}]}}`)
	set(65, `{"author":"model","content":{"parts":[{"function_call":{"id":7}},"text",{"function_call":"e"},{"function_call":{"name":"f"}}]}}`)
	set(66, `{"author":"model","content":{"parts":{"function_call":{"id":"g"}}}}`)
	must(t, s.Apply(ctx, &Batch{Sessions: []SessionUpsert{u}}))
	session1000(t, s, skey("other"))
	_, err := s.db.Exec(`ANALYZE events`)
	must(t, err)

	load := func(q ViewQuery) []int64 {
		t.Helper()
		rows, err := s.LoadViewEvents(ctx, k, q)
		must(t, err)
		var got []int64
		for _, r := range rows {
			var seq int64
			_, err := fmt.Sscanf(r.ID, eventID(inc1, 0)[:len(eventID(inc1, 0))-1]+"%d", &seq)
			must(t, err)
			if r.Key != k || r.Seq != 0 || !r.Timestamp.Equal(eventTime(inc1, seq)) {
				t.Fatalf("row %s: key %v, seq %d, time %v", r.ID, r.Key, r.Seq, r.Timestamp)
			}
			got = append(got, seq)
		}
		return got
	}
	same(t, "marked, before event 45", load(ViewQuery{Before: eventTime(inc1, 45), Marked: true}), []int64{10, 20, 30, 40})
	all := ViewQuery{Marked: true, Invocations: []string{"inv-250", "inv-3", "inv-none"}, Calls: []string{"a", "b", "zz"}, Answers: []string{"a", "b"}}
	same(t, "every part", load(all), []int64{5, 10, 20, 30, 40, 50, 60, 61, 62, 63, 499})
	same(t, "calls of a", load(ViewQuery{Calls: []string{"a"}}), []int64{60})
	same(t, "calls of c and d, once", load(ViewQuery{Calls: []string{"c", "d"}, Answers: []string{"c"}}), []int64{64})
	same(t, "no string id, no array of parts", load(ViewQuery{Calls: []string{"7", "e", "f", ""}}), []int64(nil))
	same(t, "answers before event 63", load(ViewQuery{Before: eventTime(inc1, 63), Answers: []string{"a", "b"}}), []int64{62})
	same(t, "nothing asked", load(ViewQuery{}), []int64(nil))
	var single []int64 // content.parts an object, not an array
	if s.d == postgres {
		single = []int64{66} // jsonpath's lax mode reads it as an array of it: a superset does no harm
	}
	same(t, "a single part", load(ViewQuery{Calls: []string{"g"}}), single)

	q, args := s.d.viewQuery(k, all)
	plan := queryPlan(t, s, q, args...)
	indexes := []string{"adksession_events_marked", "adksession_events_invocation", "adksession_events_calls", "adksession_events_answers"}
	scans := []string{"Seq Scan", "idx_events_app_user_session_ts"}
	if s.d == sqlite {
		indexes = []string{"adksession_events_marked", "adksession_events_invocation", "SEARCH c USING PRIMARY KEY", "SEARCH e USING INDEX sqlite_autoindex_events_1"}
		scans = []string{"SCAN events", "SCAN e ", "SCAN c", "idx_events_app_user_session_ts"}
	}
	for _, index := range indexes {
		if !strings.Contains(plan, index) {
			t.Fatalf("plan does not read %s:\n%s", index, plan)
		}
	}
	for _, scan := range scans {
		if strings.Contains(plan+"\n", scan) {
			t.Fatalf("plan scans the session's events (%s):\n%s", scan, plan)
		}
	}
}

// queryPlan is the plan of query as EXPLAIN (Postgres) or EXPLAIN QUERY
// PLAN (SQLite) gives it, a line per step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	explain := `EXPLAIN `
	if s.d == sqlite {
		explain = `EXPLAIN QUERY PLAN `
	}
	rows, err := s.db.Query(explain+query, args...)
	must(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	must(t, err)
	var plan []string
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		must(t, rows.Scan(vals...))
		plan = append(plan, fmt.Sprint(*vals[len(vals)-1].(*any)))
	}
	must(t, rows.Err())
	text := strings.Join(plan, "\n")
	t.Log(text)
	return text
}
