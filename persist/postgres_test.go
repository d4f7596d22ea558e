package persist

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/adksession/adksession/integration/testenv"
)

// The tests in this file use what only Postgres has: the reference DDL,
// databases that ADK Python or ADK JS created, timestamptz columns.

// pgDescription describes the ADK tables of a database: columns, keys,
// indexes (but adksession's own, adksession_*), triggers and the trigger
// function, as text lines.
func pgDescription(t *testing.T, db rawDB) map[string][][]string {
	const adkTables = `('adk_internal_metadata', 'app_states', 'user_states', 'sessions', 'events')`
	return map[string][][]string{
		"columns": queryStrings(t, db, `SELECT table_name, column_name, ordinal_position, data_type,
  character_maximum_length, is_nullable, column_default
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name IN `+adkTables+`
ORDER BY table_name, ordinal_position`),
		"keys": queryStrings(t, db, `SELECT tc.table_name, tc.constraint_name, tc.constraint_type,
  string_agg(k.column_name, ',' ORDER BY k.ordinal_position)
FROM information_schema.table_constraints AS tc
JOIN information_schema.key_column_usage AS k USING (constraint_schema, constraint_name, table_name)
WHERE tc.table_schema = current_schema() AND tc.table_name IN `+adkTables+`
GROUP BY 1, 2, 3 ORDER BY 1, 2`),
		"indexes": queryStrings(t, db, `SELECT tablename, indexname, indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename IN `+adkTables+` AND indexname NOT LIKE 'adksession\_%' ORDER BY 1, 2`),
		"triggers": queryStrings(t, db, `SELECT event_object_table, trigger_name, event_manipulation, action_timing,
  action_orientation, action_statement
FROM information_schema.triggers WHERE trigger_schema = current_schema() ORDER BY 1, 2`),
		"functions": queryStrings(t, db, `SELECT proname, prosrc FROM pg_proc WHERE proname = 'adk_delete_session_events'`),
	}
}

func execFile(t *testing.T, db rawDB, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile("testdata/" + name)
		must(t, err)
		_, err = db.Exec(string(b))
		must(t, err)
	}
}

func rawPostgres(t *testing.T, u string) *sql.DB {
	db, err := sql.Open("postgres", u)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPostgresSchemaIsTheReference(t *testing.T) {
	t.Parallel()
	s := migrated(t, backends[1])
	ref := rawPostgres(t, testenv.FreshDatabase(t))
	execFile(t, ref, "adk-v1-schema.sql", "adk-v1-cascade-trigger.sql")
	want := pgDescription(t, ref)
	if len(want["columns"]) != 22 || len(want["indexes"]) != 6 || len(want["triggers"]) != 1 {
		t.Fatalf("reference description looks wrong: %v", want)
	}
	same(t, "ADK tables", pgDescription(t, s.db), want)
	same(t, "adksession's indexes on ADK's tables (migration 006)", queryStrings(t, s.db, `SELECT tablename, indexname FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = 'events' AND indexname LIKE 'adksession\_%' ORDER BY 1, 2`),
		[][]string{{"events", "adksession_events_answers"}, {"events", "adksession_events_calls"},
			{"events", "adksession_events_invocation"}, {"events", "adksession_events_marked"}})
	same(t, "ADK metadata", queryStrings(t, s.db, `SELECT key, value FROM adk_internal_metadata`),
		queryStrings(t, ref, `SELECT key, value FROM adk_internal_metadata`))
}

func TestPostgresAdoptsADKPythonDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := testenv.FreshDatabase(t)
	raw := rawPostgres(t, u)
	execFile(t, raw, "adk-python-v1-postgres.sql")
	before := pgDescription(t, raw)
	must(t, Migrate(ctx, u))
	s, err := Open(ctx, u)
	must(t, err)
	defer s.Close()
	after := pgDescription(t, raw)
	same(t, "ADK Python's tables and keys are kept", []any{after["columns"], after["keys"], after["indexes"]},
		[]any{before["columns"], before["keys"], before["indexes"]})

	k := skey("py")
	insertADKSession(t, s, k, 3)
	checkADKSession(t, s, k, 3, pythonEvent)
	// Deleting goes through ADK Python's foreign key and the trigger.
	apply(t, s, &Batch{Deletes: []SessionDelete{{k, adkCreateTime.UnixMicro(), 0}}})
	same(t, "events left", queryStrings(t, raw, `SELECT count(*) FROM events`), [][]string{{"0"}})
}

func TestPostgresADKJSDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, u := migratedAt(t, backends[1])
	// ADK JS creates timestamptz columns and drops the index; and the
	// server's time zone is not UTC.
	_, err := s.db.Exec(`
ALTER TABLE events ALTER COLUMN "timestamp" TYPE timestamptz USING "timestamp" AT TIME ZONE 'UTC';
ALTER TABLE sessions ALTER COLUMN create_time TYPE timestamptz USING create_time AT TIME ZONE 'UTC',
  ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
ALTER TABLE app_states ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
ALTER TABLE user_states ALTER COLUMN update_time TYPE timestamptz USING update_time AT TIME ZONE 'UTC';
DROP INDEX idx_events_app_user_session_ts;
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'Asia/Kolkata'); END $$;`)
	must(t, err)
	raw := rawPostgres(t, u) // connections in Asia/Kolkata, as ADK JS's would be
	var tz string
	must(t, raw.QueryRow(`SHOW timezone`).Scan(&tz))
	same(t, "raw connection time zone", tz, "Asia/Kolkata")
	// The same through a handle the caller opened, in Asia/Kolkata too.
	borrowed, err := OpenDB(ctx, raw, "pgx")
	must(t, err)
	withOffset := func(t time.Time) string { return t.Format("2006-01-02 15:04:05.000000-07:00") }
	for name, s := range map[string]*Store{"js": s, "js-borrowed": borrowed} {
		k := skey(name)
		insertADKRows(t, raw, k, 3, jsEvent, withOffset)
		checkADKSession(t, s, k, 3, jsEvent)
		// What Apply wrote is the right instant in a timestamptz column too.
		var us int64
		must(t, raw.QueryRow(`SELECT (extract(epoch FROM "timestamp") * 1000000)::bigint FROM events
WHERE session_id = $1 AND id = 'ours'`, name).Scan(&us))
		same(t, name+": instant written", us, adkEventTime(4).UnixMicro())
		ls, err := s.LoadSession(ctx, k, Window{After: adkEventTime(3)})
		must(t, err)
		same(t, name+": window on timestamptz", eventIDs(ls.Events), []string{"adk-3", "ours"})
	}
	must(t, borrowed.Close())
	must(t, raw.Ping())
}

func TestPostgresURLKeepsUTC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, base := migratedAt(t, backends[1])
	u, err := url.Parse(base)
	must(t, err)
	q := u.Query()
	q.Set("timezone", "America/New_York")
	u.RawQuery = q.Encode()
	s, err := Open(ctx, u.String())
	if errors.Is(err, ErrSchema) {
		t.Fatal(err)
	}
	must(t, err)
	defer s.Close()
	var tz string
	must(t, s.db.QueryRow(`SHOW timezone`).Scan(&tz))
	same(t, "session time zone", tz, "UTC")
}
