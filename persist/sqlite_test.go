package persist

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
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
WHERE m.type = 'index' AND m.sql IS NOT NULL ORDER BY x.seqno`), [][]string{
		{"idx_events_app_user_session_ts", "app_name", "0"},
		{"idx_events_app_user_session_ts", "user_id", "0"},
		{"idx_events_app_user_session_ts", "session_id", "0"},
		{"idx_events_app_user_session_ts", "timestamp", "1"},
	})
	same(t, "trigger", queryStrings(t, s.db, `SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'`),
		[][]string{{"sessions_delete_events", "sessions"}})
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
