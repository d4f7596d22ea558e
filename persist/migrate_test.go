package persist

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tableNames lists the tables of the database.
func tableNames(t *testing.T, s *Store) []string {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`
	if s.d.name == "postgres" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	var names []string
	for _, r := range queryStrings(t, s.db, q) {
		names = append(names, r[0])
	}
	return names
}

func TestMigrate(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		u := b.newURL(t)
		if _, err := Open(ctx, u); !errors.Is(err, ErrSchema) {
			t.Fatalf("Open before Migrate: got %v, want ErrSchema", err)
		}
		must(t, Migrate(ctx, u))
		s, err := Open(ctx, u)
		must(t, err)
		defer s.Close()
		calls := []string{"adksession_event_calls"} // SQLite's call ids (migration 007)
		if b.name == "postgres" {
			calls = nil
		}
		tables := append(append([]string{"adk_internal_metadata"}, calls...), "adksession_namespaces", "adksession_schema_migrations",
			"adksession_sessions", "adksession_states", "app_states", "events", "sessions", "user_states")
		same(t, "tables", tableNames(t, s), tables)
		same(t, "migrations", queryStrings(t, s.db, `SELECT version, name FROM adksession_schema_migrations ORDER BY version`),
			[][]string{{"1", "adk_v1"}, {"2", "bookkeeping"}, {"3", "create_state"}, {"4", "tombstones"}, {"5", "behind"}, {"6", "compacted_view"}, {"7", "view_calls"}})
		same(t, "ADK metadata", queryStrings(t, s.db, `SELECT key, value FROM adk_internal_metadata`),
			[][]string{{"schema_version", "1"}})

		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 2)}})
		before := dump(t, s)
		must(t, Migrate(ctx, u))
		must(t, s.Migrate(ctx))
		same(t, "dump after migrating again", dump(t, s), before)
	})
}

func TestMigrateConcurrently(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		u := b.newURL(t)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = Migrate(ctx, u) })
		}
		wg.Wait()
		must(t, errors.Join(errs...))
		s, err := Open(ctx, u)
		must(t, err)
		defer s.Close()
		same(t, "migrations", queryStrings(t, s.db, `SELECT version FROM adksession_schema_migrations ORDER BY version`),
			[][]string{{"1"}, {"2"}, {"3"}, {"4"}, {"5"}, {"6"}, {"7"}})
	})
}

// TestMigrateFrom2: a database at version 2 (before create_state and the
// tombstone stamps) with sessions in it is upgraded in place; its sessions'
// create-time state is unknown, and batches record it from then on.
func TestMigrateFrom2(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, u := migratedAt(t, b)
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 2)}})
		for _, q := range []string{`ALTER TABLE adksession_sessions DROP COLUMN create_state`,
			`ALTER TABLE adksession_sessions DROP COLUMN tombstone_seen`, `ALTER TABLE adksession_sessions DROP COLUMN tombstone_inc`,
			`ALTER TABLE adksession_sessions DROP COLUMN written_update`, `ALTER TABLE adksession_states DROP COLUMN flushes`,
			`ALTER TABLE adksession_states DROP COLUMN orders`, `DROP TABLE adksession_namespaces`,
			`DELETE FROM adksession_schema_migrations WHERE version >= 3`} {
			_, err := s.db.Exec(q)
			must(t, err)
		}
		before := dump(t, s)
		if _, err := Open(ctx, u); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "found version 2, want 7") {
			t.Fatalf("Open at version 2: got %v, want ErrSchema", err)
		}
		must(t, Migrate(ctx, u))
		s2, err := Open(ctx, u)
		must(t, err)
		defer s2.Close()
		same(t, "rows kept", dump(t, s2)["sessions"], before["sessions"])
		same(t, "bookkeeping kept", queryStrings(t, s2.db, `SELECT session_id, rev, create_state, tombstone_seen, tombstone_inc, written_update FROM adksession_sessions`),
			[][]string{{"s1", "2", "", "", "", ""}})
		_, ok, err := s2.LoadCreateState(ctx, skey("s1"), inc1)
		must(t, err)
		same(t, "create-time state of an older session", ok, false)
	})
}

func TestOpenRefusesOtherSchemas(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, tc := range []struct {
			name, change, want string
		}{
			{"older adksession", `DELETE FROM adksession_schema_migrations WHERE version = 7`, "found version 6, want 7"},
			{"newer adksession", `INSERT INTO adksession_schema_migrations VALUES (8, 'future', '2030-01-01 00:00:00')`, "found version 8, want 7"},
			{"other ADK schema", `UPDATE adk_internal_metadata SET value = '2'`, `found ADK schema_version "2", want "1"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, u := migratedAt(t, b)
				_, err := s.db.Exec(tc.change)
				must(t, err)
				_, err = Open(ctx, u)
				if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open: got %v, want ErrSchema with %q", err, tc.want)
				}
			})
		}
	})
}

func TestMigrateRefusesV0(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		u := b.newURL(t)
		s, err := open(ctx, u)
		must(t, err)
		defer s.Close()
		_, err = s.db.Exec(`CREATE TABLE events (id varchar(128) NOT NULL, app_name varchar(128), content text)`)
		must(t, err)
		if err := Migrate(ctx, u); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "v0") {
			t.Fatalf("Migrate: got %v, want ErrSchema about v0", err)
		}
		if slices.Contains(tableNames(t, s), "adksession_schema_migrations") {
			t.Fatal("a refused migration left tables behind")
		}
	})
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"mysql://x", "sqlite://", "sqlite:///tmp/x.db?mode=ro", "file.db"} {
		if _, err := Open(ctx, u); err == nil || errors.Is(err, ErrSchema) {
			t.Errorf("Open(%q): got %v, want a URL error", u, err)
		}
	}
}
