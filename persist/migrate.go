package persist

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// migrationFS holds the migrations, one directory per dialect, each file
// named NNN_name.sql and applied in version order. They are forward-only.
//
//go:embed migrations
var migrationFS embed.FS

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
	sql     string
}

// adkSchemaVersion is the adk_internal_metadata schema_version of ADK's v1
// DatabaseSessionService schema.
const adkSchemaVersion = "1"

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS adksession_schema_migrations (
  version    integer      NOT NULL PRIMARY KEY,
  name       varchar(255) NOT NULL,
  applied_at timestamp    NOT NULL
)`

// Migrate brings the database at url to the current schema (see Open for
// the URL forms). It is idempotent, and safe when several processes run it
// at once: on Postgres they serialize on an advisory lock, on SQLite on the
// database's write lock.
func Migrate(ctx context.Context, url string) error {
	s, err := open(ctx, url)
	if err != nil {
		return err
	}
	return errors.Join(s.Migrate(ctx), s.Close())
}

// Migrate applies the migrations that the database lacks, all in one
// transaction. A database created by ADK Python or ADK JS (v1 schema) is
// adopted as it is; one with ADK Python's older v0 schema is refused with
// ErrSchema.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations(s.d.migrations)
	if err != nil {
		return err
	}
	tx, err := s.beginTxx(ctx, s.db, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if q := s.d.q.lockMigrations; q != "" {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, createMigrationsTable); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	current, err := migratedVersion(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	latest := ms[len(ms)-1].version
	if current > latest {
		return fmt.Errorf("migrate: %w: found version %d, this adksession knows up to %d", ErrSchema, current, latest)
	}
	if current == 0 {
		if err := refuseV0(ctx, tx, s.d); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate: apply %03d_%s: %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO adksession_schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, formatTime(time.Now())); err != nil {
			return fmt.Errorf("migrate: record %03d_%s: %w", m.version, m.name, err)
		}
	}
	if err := checkADKVersion(ctx, tx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// checkSchema returns an error wrapping ErrSchema unless the database is
// at the latest migration with ADK's v1 schema.
func (s *Store) checkSchema(ctx context.Context) error {
	ms, err := loadMigrations(s.d.migrations)
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version
	ok, err := tableExists(ctx, s.db, s.d, "adksession_schema_migrations")
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: no adksession migrations applied, want version %d (run adksession migrate)", ErrSchema, latest)
	}
	current, err := migratedVersion(ctx, s.db)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if current != latest {
		return fmt.Errorf("%w: found version %d, want %d (run adksession migrate)", ErrSchema, current, latest)
	}
	return checkADKVersion(ctx, s.db)
}

func migratedVersion(ctx context.Context, q sqlx.QueryerContext) (int, error) {
	var v int
	err := sqlx.GetContext(ctx, q, &v, `SELECT COALESCE(MAX(version), 0) FROM adksession_schema_migrations`)
	if err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	return v, nil
}

func checkADKVersion(ctx context.Context, q sqlx.QueryerContext) error {
	var v string
	err := sqlx.GetContext(ctx, q, &v, `SELECT value FROM adk_internal_metadata WHERE key = 'schema_version'`)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: adk_internal_metadata has no schema_version, want %q", ErrSchema, adkSchemaVersion)
	}
	if err != nil {
		return fmt.Errorf("read ADK schema version: %w", err)
	}
	if v != adkSchemaVersion {
		return fmt.Errorf("%w: found ADK schema_version %q, want %q", ErrSchema, v, adkSchemaVersion)
	}
	return nil
}

// refuseV0 returns ErrSchema for a database that ADK Python created with its
// v0 schema (an events table but no adk_internal_metadata): its rows must be
// migrated by ADK's own tool first.
func refuseV0(ctx context.Context, q sqlx.QueryerContext, d *dialect) error {
	events, err := tableExists(ctx, q, d, "events")
	if err != nil {
		return err
	}
	meta, err := tableExists(ctx, q, d, "adk_internal_metadata")
	if err != nil {
		return err
	}
	if events && !meta {
		return fmt.Errorf("%w: found ADK's v0 schema (events without adk_internal_metadata); migrate it with ADK Python's migration tool first", ErrSchema)
	}
	return nil
}

func tableExists(ctx context.Context, q sqlx.QueryerContext, d *dialect, table string) (bool, error) {
	var ok bool
	if err := sqlx.GetContext(ctx, q, &ok, d.tableExists, table); err != nil {
		return false, fmt.Errorf("look up table %s: %w", table, err)
	}
	return ok, nil
}

// loadMigrations reads the migrations of one dialect, in version order.
func loadMigrations(dir string) ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".sql")
		num, name, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || v <= 0 {
			return nil, fmt.Errorf("read migrations: bad file name %s", e.Name())
		}
		b, err := fs.ReadFile(migrationFS, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migrations: %w", err)
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	if len(ms) == 0 {
		return nil, fmt.Errorf("read migrations: none in %s", dir)
	}
	return ms, nil
}
