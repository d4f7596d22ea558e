package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/adksession/adksession/cache/base"
)

// ViewQuery names the events of a session that the compacted view's walk
// over the database reads by index (docs/persistence.md, "The compacted view
// in SQL"), each part a read of one index (Postgres's migration 006,
// SQLite's 007); all of them older than Before (zero: no bound).
type ViewQuery struct {
	Before time.Time
	// Marked: the events every compacted view reads (a compaction in either
	// ADK form, a rewind, an isolation scope), adksession_events_marked.
	Marked bool
	// Invocations: the first event of each, adksession_events_invocation.
	Invocations []string
	// Calls, Answers: the events with a function call / response of one of
	// these ids: on Postgres adksession_events_calls / _answers, on SQLite
	// adksession_event_calls.
	Calls, Answers []string
}

// The predicates and expressions of Postgres's partial indexes (migration
// 006, the call ids' as 007 recreated them), as their statements spell
// them: a query that repeats one is answered from the index.
const (
	markedEvent = `((event_data -> 'actions' -> 'compaction') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewind_before_invocation_id') IS NOT NULL
     OR (event_data -> 'actions' -> 'rewindBeforeInvocationId') IS NOT NULL
     OR event_data ? 'is_compacted' OR event_data ? 'isCompacted'
     OR event_data ? 'isolation_scope' OR event_data ? 'isolationScope')`
	callIDs = `jsonb_path_query_array(event_data,
    '$.content.parts[*] ? (@.type() == "object").keyvalue() ? (@.key == "function_call" || @.key == "functionCall").value.id')`
	hasCalls = `jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_call) || exists(@.functionCall))')`
	answerIDs = `jsonb_path_query_array(event_data,
    '$.content.parts[*] ? (@.type() == "object").keyvalue() ? (@.key == "function_response" || @.key == "functionResponse").value.id')`
	hasAnswers = `jsonb_path_exists(event_data,
    '$.content.parts[*] ? (exists(@.function_response) || exists(@.functionResponse))')`
)

// sqliteMarked is the predicate of SQLite's adksession_events_marked
// (migration 007), as its statement spells it.
const sqliteMarked = `CASE WHEN json_valid(event_data) THEN
      json_type(event_data, '$.actions.compaction') IS NOT NULL
   OR json_type(event_data, '$.actions.rewind_before_invocation_id') IS NOT NULL
   OR json_type(event_data, '$.actions.rewindBeforeInvocationId') IS NOT NULL
   OR json_type(event_data, '$.is_compacted') IS NOT NULL
   OR json_type(event_data, '$.isCompacted') IS NOT NULL
   OR json_type(event_data, '$.isolation_scope') IS NOT NULL
   OR json_type(event_data, '$.isolationScope') IS NOT NULL END`

// postgresViewQuery is LoadViewEvents's query on Postgres ("" when it reads
// nothing) and its arguments, placeholders written out (the jsonb operators
// ? and ?| are no placeholders): one part per index read, joined by UNION
// ALL.
func postgresViewQuery(key base.SessionRef, q ViewQuery) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := func() string {
		w := `SELECT ` + eventColumns + ` FROM events WHERE app_name = ` + arg(key.App) +
			` AND user_id = ` + arg(key.User) + ` AND session_id = ` + arg(key.ID)
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

// sqliteViewQuery is LoadViewEvents's query on SQLite ("" when it reads
// nothing) and its arguments: the marked events and the first of each
// invocation from migration 007's indexes on events, the calls and answers
// from adksession_event_calls, each event then by events' primary key (a
// CROSS JOIN keeps that order); one part per index read, joined by UNION
// ALL.
func sqliteViewQuery(key base.SessionRef, q ViewQuery) (string, []any) {
	var args []any
	session := func(alias string) string {
		args = append(args, key.App, key.User, key.ID)
		return alias + `app_name = ? AND ` + alias + `user_id = ? AND ` + alias + `session_id = ?`
	}
	before := func(alias string) string {
		if q.Before.IsZero() {
			return ""
		}
		args = append(args, formatTime(q.Before))
		return ` AND ` + alias + `"timestamp" < ?`
	}
	var parts []string
	if q.Marked {
		parts = append(parts, `SELECT `+eventColumns+` FROM events WHERE `+session("")+before("")+` AND `+sqliteMarked)
	}
	for _, inv := range q.Invocations {
		w := `SELECT ` + eventColumns + ` FROM events WHERE ` + session("") + before("")
		args = append(args, inv)
		parts = append(parts, `SELECT * FROM (`+w+` AND invocation_id = ? ORDER BY "timestamp" LIMIT 1)`)
	}
	calls := func(answer int, ids []string) {
		if len(ids) == 0 {
			return
		}
		w := `SELECT e.id, e.invocation_id, e."timestamp", e.event_data FROM adksession_event_calls AS c
CROSS JOIN events AS e ON e.id = c.event_id AND e.app_name = c.app_name AND e.user_id = c.user_id AND e.session_id = c.session_id
WHERE ` + session("c.")
		b, _ := json.Marshal(ids) // strings always encode
		args = append(args, answer, string(b))
		parts = append(parts, w+` AND c.answer = ? AND c.call_id IN (SELECT value FROM json_each(?))`+before("e."))
	}
	calls(0, q.Calls)
	calls(1, q.Answers)
	if len(parts) == 0 {
		return "", nil
	}
	return `SELECT * FROM (` + strings.Join(parts, "\nUNION ALL\n") + `) AS v ORDER BY "timestamp"`, args
}

// LoadViewEvents reads the events of key that q names, oldest first, each
// once, without their seqs (0). Each part is a read of one index: O(log n)
// per part, plus the events read (without the indexes, which ADK JS's
// init() drops on Postgres, the same answer, read from the session's
// events).
func (s *Store) LoadViewEvents(ctx context.Context, key base.SessionRef, q ViewQuery) ([]EventRow, error) {
	query, args := s.d.viewQuery(key, q)
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
func (s *Store) distinctEvents(key base.SessionRef, rows []storedEvent) []EventRow {
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
