package persist

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// The tests in this file check what only SQLite has.

func TestSQLiteSchema(t *testing.T) {
	t.Parallel()
	s := migrated(t, backends[0])
	same(t, "columns", queryStrings(t, s.db, `SELECT m.name, p.name, p.type, p."notnull", p.pk
FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p
WHERE m.type = 'table' ORDER BY m.name, p.cid`), [][]string{
		{"adk_internal_metadata", "key", "VARCHAR(255)", "1", "1"},
		{"adk_internal_metadata", "value", "VARCHAR(255)", "1", "0"},
		{"adksession_event_calls", "app_name", "VARCHAR(191)", "1", "1"},
		{"adksession_event_calls", "user_id", "VARCHAR(191)", "1", "2"},
		{"adksession_event_calls", "session_id", "VARCHAR(191)", "1", "3"},
		{"adksession_event_calls", "answer", "INTEGER", "1", "4"},
		{"adksession_event_calls", "call_id", "TEXT", "1", "5"},
		{"adksession_event_calls", "event_id", "VARCHAR(191)", "1", "6"},
		{"adksession_namespaces", "namespace", "varchar(255)", "1", "1"},
		{"adksession_namespaces", "last_seen", "DATETIME", "1", "0"},
		{"adksession_schema_migrations", "version", "INTEGER", "1", "1"},
		{"adksession_schema_migrations", "name", "varchar(255)", "1", "0"},
		{"adksession_schema_migrations", "applied_at", "timestamp", "1", "0"},
		{"adksession_sessions", "app_name", "VARCHAR(191)", "1", "1"},
		{"adksession_sessions", "user_id", "VARCHAR(191)", "1", "2"},
		{"adksession_sessions", "session_id", "VARCHAR(191)", "1", "3"},
		{"adksession_sessions", "incarnation", "BIGINT", "1", "0"},
		{"adksession_sessions", "rev", "BIGINT", "1", "0"},
		{"adksession_sessions", "deleted", "BOOLEAN", "1", "0"},
		{"adksession_sessions", "create_state", "TEXT", "0", "0"},
		{"adksession_sessions", "tombstone_seen", "DATETIME", "0", "0"},
		{"adksession_sessions", "tombstone_inc", "BIGINT", "0", "0"},
		{"adksession_sessions", "written_update", "BIGINT", "0", "0"},
		{"adksession_states", "app_name", "VARCHAR(191)", "1", "1"},
		{"adksession_states", "user_id", "VARCHAR(191)", "1", "2"},
		{"adksession_states", "rev", "BIGINT", "1", "0"},
		{"adksession_states", "flushes", "BIGINT", "0", "0"},
		{"adksession_states", "orders", "TEXT", "0", "0"},
		{"app_states", "app_name", "VARCHAR(191)", "1", "1"},
		{"app_states", "state", "TEXT", "1", "0"},
		{"app_states", "update_time", "DATETIME", "1", "0"},
		{"events", "id", "VARCHAR(191)", "1", "1"},
		{"events", "app_name", "VARCHAR(191)", "1", "2"},
		{"events", "user_id", "VARCHAR(191)", "1", "3"},
		{"events", "session_id", "VARCHAR(191)", "1", "4"},
		{"events", "invocation_id", "VARCHAR(255)", "1", "0"},
		{"events", "timestamp", "DATETIME", "1", "0"},
		{"events", "event_data", "TEXT", "1", "0"},
		{"sessions", "app_name", "VARCHAR(191)", "1", "1"},
		{"sessions", "user_id", "VARCHAR(191)", "1", "2"},
		{"sessions", "id", "VARCHAR(191)", "1", "3"},
		{"sessions", "state", "TEXT", "1", "0"},
		{"sessions", "create_time", "DATETIME", "1", "0"},
		{"sessions", "update_time", "DATETIME", "1", "0"},
		{"user_states", "app_name", "VARCHAR(191)", "1", "1"},
		{"user_states", "user_id", "VARCHAR(191)", "1", "2"},
		{"user_states", "state", "TEXT", "1", "0"},
		{"user_states", "update_time", "DATETIME", "1", "0"},
	})
	same(t, "index", queryStrings(t, s.db, `SELECT m.name, p.name, x.desc FROM sqlite_master AS m
JOIN pragma_index_xinfo(m.name) AS x JOIN pragma_index_info(m.name) AS p ON p.seqno = x.seqno
WHERE m.type = 'index' AND m.sql IS NOT NULL ORDER BY m.name, x.seqno`), [][]string{
		{"adksession_event_calls_event", "app_name", "0"},
		{"adksession_event_calls_event", "user_id", "0"},
		{"adksession_event_calls_event", "session_id", "0"},
		{"adksession_event_calls_event", "event_id", "0"},
		{"adksession_events_invocation", "app_name", "0"},
		{"adksession_events_invocation", "user_id", "0"},
		{"adksession_events_invocation", "session_id", "0"},
		{"adksession_events_invocation", "invocation_id", "0"},
		{"adksession_events_invocation", "timestamp", "0"},
		{"adksession_events_marked", "app_name", "0"},
		{"adksession_events_marked", "user_id", "0"},
		{"adksession_events_marked", "session_id", "0"},
		{"adksession_events_marked", "timestamp", "0"},
		{"idx_events_app_user_session_ts", "app_name", "0"},
		{"idx_events_app_user_session_ts", "user_id", "0"},
		{"idx_events_app_user_session_ts", "session_id", "0"},
		{"idx_events_app_user_session_ts", "timestamp", "1"},
	})
	same(t, "trigger", queryStrings(t, s.db, `SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' ORDER BY name`),
		[][]string{{"adksession_event_calls_delete", "events"}, {"adksession_event_calls_insert", "events"},
			{"adksession_event_calls_update", "events"}, {"sessions_delete_events", "sessions"}})
	same(t, "journal mode", queryStrings(t, s.db, `PRAGMA journal_mode`), [][]string{{"wal"}})
	same(t, "foreign keys", queryStrings(t, s.db, `PRAGMA foreign_keys`), [][]string{{"0"}})
}

func TestSQLiteAdoptsADKPythonDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := sqliteURL(t)
	s, err := open(ctx, u)
	must(t, err)
	execFile(t, s.db, "adk-python-v1-sqlite.sql")
	s.Close()
	must(t, Migrate(ctx, u))
	s, err = Open(ctx, u)
	must(t, err)
	defer s.Close()
	same(t, "ADK Python's key length is kept", queryStrings(t, s.db, `SELECT type FROM pragma_table_info('sessions') WHERE name = 'id'`),
		[][]string{{"VARCHAR(128)"}})
	k := skey("py")
	insertADKSession(t, s, k, 3)
	checkADKSession(t, s, k, 3, pythonEvent)
	apply(t, s, &Batch{Deletes: []SessionDelete{{k, adkCreateTime.UnixMicro(), 0}}})
	same(t, "events left", queryStrings(t, s.db, `SELECT count(*) FROM events`), [][]string{{"0"}})
}

// TestSQLiteBorrowedHandle: a SQLite handle the caller opened is migrated
// and used for reads and writes, and left open by Close.
func TestSQLiteBorrowedHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "own.db")
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	must(t, err)
	defer db.Close()
	must(t, MigrateDB(ctx, db, "sqlite3"))
	s, err := OpenDB(ctx, db, "sqlite")
	must(t, err)
	k := skey("mine")
	insertADKSession(t, s, k, 3)
	checkADKSession(t, s, k, 3, pythonEvent)
	must(t, s.Close())
	must(t, db.Ping())

	_, err = OpenDB(ctx, db, "mysql")
	if err == nil {
		t.Fatal("OpenDB with an unknown dialect: no error")
	}
	fresh, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "fresh.db"))
	must(t, err)
	defer fresh.Close()
	if _, err := OpenDB(ctx, fresh, "sqlite"); !errors.Is(err, ErrSchema) {
		t.Fatalf("OpenDB of an unmigrated database: %v, want ErrSchema", err)
	}
}

// TestSQLiteEventCalls: migration 007's adksession_event_calls holds the
// call ids of every events row, whoever writes it (here raw SQL, as ADK
// Python and ADK JS write): a row per string id of a part's function call
// or response, in either spelling; none for a row whose event_data is not
// JSON, which is still written; gone with its event or its session (ADK's
// cascade trigger), derived again when the event changes, and filled in for
// the rows written before the migration. The triggers read one event by
// events' primary key.
func TestSQLiteEventCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := migratedAt(t, backends[0])
	insert := func(id, session, data string) {
		t.Helper()
		_, err := s.db.Exec(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data)
VALUES (?, 'app', 'u', ?, 'inv', '2026-01-01 00:00:00.000000', ?)`, id, session, data)
		must(t, err)
	}
	calls := func() [][]string {
		t.Helper()
		return queryStrings(t, s.db, `SELECT session_id, answer, call_id, event_id FROM adksession_event_calls ORDER BY 1, 2, 3, 4`)
	}
	_, err := s.db.Exec(`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
VALUES ('app', 'u', 's1', '{}', '2026-01-01 00:00:00', '2026-01-01 00:00:00'), ('app', 'u', 's2', '{}', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`)
	must(t, err)
	insert("e1", "s1", `{"content":{"parts":[{"function_call":{"id":"a","name":"f"}},{"text":"x"},{"functionCall":{"id":"b"}}]}}`)
	insert("e2", "s1", `{"content":{"parts":[{"function_response":{"id":"a"}},{"functionResponse":{"id":"b"}},"odd",7,null,{"function_call":{"id":3}}]}}`)
	insert("e3", "s1", `not json {`)
	insert("e4", "s1", `{"content":{"parts":{"function_call":{"id":"c"}}}}`)
	insert("e1", "s2", `{"content":{"parts":[{"function_call":{"id":"a"}}]}}`)
	want := [][]string{{"s1", "0", "a", "e1"}, {"s1", "0", "b", "e1"}, {"s1", "1", "a", "e2"}, {"s1", "1", "b", "e2"}, {"s2", "0", "a", "e1"}}
	same(t, "call ids", calls(), want)
	same(t, "the row not JSON is written", queryStrings(t, s.db, `SELECT event_data FROM events WHERE id = 'e3'`), [][]string{{"not json {"}})

	_, err = s.db.Exec(`UPDATE events SET event_data = '{"content":{"parts":[{"functionCall":{"id":"z"}}]}}' WHERE id = 'e1' AND session_id = 's1'`)
	must(t, err)
	want = [][]string{{"s1", "0", "z", "e1"}, {"s1", "1", "a", "e2"}, {"s1", "1", "b", "e2"}, {"s2", "0", "a", "e1"}}
	same(t, "call ids after an update", calls(), want)
	_, err = s.db.Exec(`DELETE FROM events WHERE id = 'e2'`)
	must(t, err)
	same(t, "call ids after a delete", calls(), [][]string{{"s1", "0", "z", "e1"}, {"s2", "0", "a", "e1"}})

	_, err = s.db.Exec(`DELETE FROM adksession_event_calls`)
	must(t, err)
	_, err = s.db.Exec(`DELETE FROM adksession_schema_migrations WHERE version = 7`)
	must(t, err)
	must(t, Migrate(ctx, u))
	same(t, "call ids filled in by the migration", calls(), [][]string{{"s1", "0", "z", "e1"}, {"s2", "0", "a", "e1"}})

	_, err = s.db.Exec(`DELETE FROM sessions WHERE id = 's1'`)
	must(t, err)
	same(t, "call ids after the session's delete", calls(), [][]string{{"s2", "0", "a", "e1"}})

	plan := queryPlan(t, s, `SELECT * FROM adksession_event_call_ids WHERE event_id = ? AND app_name = ? AND user_id = ? AND session_id = ?`, "e1", "app", "u", "s2")
	if !strings.Contains(plan, "SEARCH e USING INDEX sqlite_autoindex_events_1 (id=? AND app_name=? AND user_id=? AND session_id=?)") {
		t.Fatalf("the triggers' read of an event's call ids does not read it by events' primary key:\n%s", plan)
	}
}
