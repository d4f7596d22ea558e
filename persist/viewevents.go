package persist

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// ViewQuery names the events of a session that the compacted view's walk
// over the database reads by index (docs/persistence.md, "The compacted view
// in SQL"), each part a read of one of migration 006's indexes; all of them
// older than Before (zero: no bound).
type ViewQuery struct {
	Before time.Time
	// Marked: the events every compacted view reads (a compaction in either
	// ADK form, a rewind, an isolation scope), adksession_events_marked.
	Marked bool
	// Invocations: the first event of each, adksession_events_invocation.
	Invocations []string
	// Calls, Answers: the events with a function call / response of one of
	// these ids, adksession_events_calls / adksession_events_answers.
	Calls, Answers []string
}

// The predicates of migration 006's partial indexes, as its statements
// spell them: a query that repeats one is answered from the index.
const (
	markedEvent = `((event_data -> 'actions' -> 'compaction') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewind_before_invocation_id') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewindBeforeInvocationId') IS NOT NULL
     OR event_data ? 'is_compacted' OR event_data ? 'isCompacted'
     OR event_data ? 'isolation_scope' OR event_data ? 'isolationScope')`
	callIDs = `jsonb_path_query_array(event_data,
    '$.content.parts[*].keyvalue() ? (@.key == "function_call" || @.key == "functionCall").value.id')`
	hasCalls = `jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_call) || exists(@.functionCall))')`
	answerIDs = `jsonb_path_query_array(event_data,
    '$.content.parts[*].keyvalue() ? (@.key == "function_response" || @.key == "functionResponse").value.id')`
	hasAnswers = `jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_response) || exists(@.functionResponse))')`
)

// ViewIndexed reports whether the database answers LoadViewEvents from
// indexes: Postgres (migration 006). SQLite has no index over the function
// call ids of a JSON array: there the compacted view of a session Redis lost
// reads the whole history.
func (s *Store) ViewIndexed() bool { return s.d == postgres }

// viewQuery is LoadViewEvents's query ("" when it reads nothing) and its
// arguments, Postgres placeholders written out (the jsonb operators ? and ?|
// are no placeholders): one part per index read, joined by UNION ALL.
func viewQuery(key SessionKey, q ViewQuery) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := func() string {
		w := `SELECT ` + eventColumns + ` FROM events WHERE app_name = ` + arg(key.AppName) +
			` AND user_id = ` + arg(key.UserID) + ` AND session_id = ` + arg(key.SessionID)
		if !q.Before.IsZero() {
			w += ` AND "timestamp" < ` + arg(formatTime(q.Before))
		}
		return w
	}
	var parts []string
	if q.Marked {
		parts = append(parts, where()+` AND `+markedEvent)
	}
	for _, inv := range q.Invocations {
		parts = append(parts, `(`+where()+` AND invocation_id = `+arg(inv)+` ORDER BY "timestamp" LIMIT 1)`)
	}
	if len(q.Calls) > 0 {
		parts = append(parts, where()+` AND `+hasCalls+` AND `+callIDs+` ?| `+arg(pq.Array(q.Calls))+`::text[]`)
	}
	if len(q.Answers) > 0 {
		parts = append(parts, where()+` AND `+hasAnswers+` AND `+answerIDs+` ?| `+arg(pq.Array(q.Answers))+`::text[]`)
	}
	if len(parts) == 0 {
		return "", nil
	}
	return `SELECT * FROM (` + strings.Join(parts, "\nUNION ALL\n") + `) AS v ORDER BY "timestamp"`, args
}

// LoadViewEvents reads the events of key that q names, oldest first, each
// once, without their seqs (0). Each part is a read of one of migration
// 006's indexes: O(log n) per part, plus the events read (without them,
// dropped by ADK JS's init(), the same answer, read from the session's
// events). Postgres only (ViewIndexed).
func (s *Store) LoadViewEvents(ctx context.Context, key SessionKey, q ViewQuery) ([]EventRow, error) {
	if s.d != postgres {
		return nil, fmt.Errorf("load the compacted view's events of %s: not on %s", key, s.d.name)
	}
	query, args := viewQuery(key, q)
	if query == "" {
		return nil, nil
	}
	var rows []storedEvent
	if err := sqlx.SelectContext(ctx, s.rd, &rows, query, args...); err != nil {
		return nil, fmt.Errorf("load the compacted view's events of %s: %w", key, err)
	}
	return s.distinctEvents(key, rows), nil
}

// distinctEvents turns rows ordered by time into events, each once (a row
// that two parts read comes twice, next to itself).
func (s *Store) distinctEvents(key SessionKey, rows []storedEvent) []EventRow {
	out := make([]EventRow, 0, len(rows))
	seen := map[string]bool{}
	for i := range rows {
		if i > 0 && !rows[i].Timestamp.t.Equal(rows[i-1].Timestamp.t) {
			clear(seen)
		}
		if seen[rows[i].ID] {
			continue
		}
		seen[rows[i].ID] = true
		out = append(out, rows[i].event(s.d, key))
	}
	return out
}
