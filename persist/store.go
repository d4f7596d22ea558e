// Package persist is adksession's database layer: ADK's v1
// DatabaseSessionService schema on Postgres or SQLite, its migrations, the
// idempotent batch writes of the write-behind flusher (Store.Apply) and the
// cold reads of the loader (Store.LoadSession and friends). It knows nothing
// of Redis: the flusher, which moves the change log into these writes, is
// package loader's.
//
// The rows it writes are the rows ADK Python's and ADK JS's
// DatabaseSessionService read; its own bookkeeping lives in extra tables that
// ADK ignores. docs/persistence.md describes the tables and the rules.
//
// Store keeps event JSON opaque; package cache/eventjson converts an event
// between ADK's API form and the storage form of event_data, for the flusher
// (StorageEvent) and for the columns that repeat in event_data (WithColumns).
//
// It is internal to adksession: its exported names serve the packages of this
// module and may change at any time. Programs use package service (Migrate,
// ErrSchema, the flusher that Open starts).
package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	lite "modernc.org/sqlite" // also registers the "sqlite" driver
)

// ErrSchema reports a database whose schema is not the one this version of
// adksession writes; run Migrate. It is wrapped with the versions found.
var ErrSchema = errors.New("adksession: database schema is not migrated")

// ErrInvalidBatch reports a batch that no retry can apply (an event whose
// data is not a JSON object, a state value that is not JSON). Apply wraps it
// with the offending key and writes nothing.
var ErrInvalidBatch = errors.New("adksession: invalid batch")

// Store is a connection pool to one database. It is safe for concurrent use.
//
// Its handles are sqlx's, over database/sql pools: queries scan into row
// structs with db tags (sqlx.SelectContext, GetContext), and queries built
// by hand are written with ? placeholders and rebound to the dialect's.
type Store struct {
	d  *dialect
	db *sqlx.DB // writes; on SQLite a single connection
	rd *sqlx.DB // reads; the same pool as db on Postgres
	// borrowed: the caller's handle (OpenDB), which Close leaves open and
	// whose session settings are not ours.
	borrowed bool
}

// Open connects to the database at url and checks that its schema is
// current, returning an error wrapping ErrSchema if it is not.
//
// url is "postgres://..." or "postgresql://..." (lib/pq; TLS through sslmode,
// the session time zone is always UTC) or "sqlite:///abs/path/file.db" /
// "sqlite://relative/file.db" (modernc.org/sqlite in WAL mode, one writer
// connection, foreign keys off).
func Open(ctx context.Context, url string) (*Store, error) {
	s, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := s.checkSchema(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// open connects without looking at the schema.
func open(ctx context.Context, url string) (*Store, error) {
	var s *Store
	var err error
	scheme, _, _ := strings.Cut(url, ":")
	switch scheme {
	case "postgres", "postgresql":
		s, err = openPostgres(url)
	case "sqlite":
		s, err = openSQLite(ctx, url)
	default:
		return nil, fmt.Errorf("open database: unsupported URL scheme %q (want postgres:// or sqlite://)", scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", scheme, err)
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s database: %w", s.d.name, err)
	}
	return s, nil
}

func openPostgres(url string) (*Store, error) {
	cfg, err := pq.NewConfig(url)
	if err != nil {
		return nil, err
	}
	// Timestamps are stored as UTC wall-clock times; with the session in UTC
	// the conversions to and from timestamptz columns (as ADK JS creates
	// them) are exact too.
	rt := make(map[string]string, len(cfg.Runtime)+1)
	for k, v := range cfg.Runtime {
		if !strings.EqualFold(k, "timezone") {
			rt[k] = v
		}
	}
	rt["TimeZone"] = "UTC"
	cfg.Runtime = rt
	c, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, err
	}
	raw := sql.OpenDB(c)
	// database/sql keeps 2 idle connections by default: the flusher's
	// parallel batches and the cold reads would open (fork a backend, and
	// authenticate) and close a connection for most transactions.
	raw.SetMaxIdleConns(pgIdleConns)
	db := sqlx.NewDb(raw, postgres.bindDriver)
	return &Store{d: postgres, db: db, rd: db}, nil
}

// pgIdleConns is how many idle connections a Store that Open opened on
// Postgres keeps: the flusher's parallel batches (loader.FlusherOptions.Parallel,
// 4 by default) plus cold reads.
const pgIdleConns = 8

func openSQLite(ctx context.Context, url string) (*Store, error) {
	writer, reader, err := sqliteDSNs(url)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", writer)
	if err != nil {
		return nil, err
	}
	if err := useWAL(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	db.SetMaxOpenConns(1)
	rd, err := sql.Open("sqlite", reader)
	if err != nil {
		db.Close()
		return nil, err
	}
	rd.SetMaxOpenConns(4)
	return &Store{d: sqlite, db: sqlx.NewDb(db, sqlite.bindDriver), rd: sqlx.NewDb(rd, sqlite.bindDriver)}, nil
}

// sqliteDSNs returns the modernc.org/sqlite data source names of the writer
// connection (transactions BEGIN IMMEDIATE) and of the read-only pool.
func sqliteDSNs(url string) (writer, reader string, err error) {
	path, ok := strings.CutPrefix(url, "sqlite://")
	if !ok || path == "" || strings.ContainsAny(path, "?#") {
		return "", "", errors.New("want sqlite:///abs/path/file.db or sqlite://relative/file.db, without query parameters")
	}
	pragmas := "?_pragma=busy_timeout(" + strconv.FormatInt(sqliteBusyTimeout.Milliseconds(), 10) + ")&_pragma=foreign_keys(0)"
	return path + pragmas + "&_txlock=immediate", path + pragmas + "&_pragma=query_only(1)", nil
}

// sqliteBusyTimeout is how long a SQLite connection waits for another's lock.
const sqliteBusyTimeout = 10 * time.Second

// useWAL puts the database file in WAL mode (the mode is kept in the file).
// Switching a new file to WAL takes an exclusive lock for which SQLite does
// not call the busy handler: a process opening the file while another
// migrates it gets SQLITE_BUSY at once. So the switch is retried here, for
// as long as the busy timeout, rather than set as a connection pragma.
func useWAL(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, sqliteBusyTimeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		_, err := db.ExecContext(ctx, `PRAGMA journal_mode=WAL`)
		var liteErr *lite.Error
		if err == nil || !errors.As(err, &liteErr) || liteErr.Code()&0xff != sqliteBusy {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("switch to WAL mode: %w", err)
		case <-time.After(wait):
		}
	}
}

// sqliteBusy is SQLITE_BUSY, the primary result code of a lock not taken.
const sqliteBusy = 5

// OpenDB uses db, a handle the caller opened and configured (pool sizes,
// TLS, tracing), instead of opening one; Close leaves it open. dialect
// names its database: "postgres" (also the driver names "postgresql",
// "pgx", "pq") or "sqlite" (also "sqlite3"); for a *sqlx.DB x pass x.DB
// and x.DriverName(). The schema must be current, as for Open.
//
// A Postgres handle may use any session time zone: every transaction sets
// it to UTC for itself. A SQLite handle is used for reads and writes alike;
// open it with a busy timeout and, for the modernc.org/sqlite driver,
// _txlock=immediate (see docs/persistence.md).
func OpenDB(ctx context.Context, db *sql.DB, dialect string) (*Store, error) {
	s, err := borrow(ctx, db, dialect)
	if err != nil {
		return nil, err
	}
	if err := s.checkSchema(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// MigrateDB is Migrate on a handle the caller opened (see OpenDB); it
// leaves db open.
func MigrateDB(ctx context.Context, db *sql.DB, dialect string) error {
	s, err := borrow(ctx, db, dialect)
	if err != nil {
		return err
	}
	return s.Migrate(ctx)
}

func borrow(ctx context.Context, db *sql.DB, name string) (*Store, error) {
	if db == nil {
		return nil, errors.New("open database: nil handle")
	}
	d := dialectNamed(name)
	if d == nil {
		return nil, fmt.Errorf("open database: unknown dialect %q (want postgres or sqlite)", name)
	}
	x := sqlx.NewDb(db, d.bindDriver)
	s := &Store{d: d, db: x, rd: x, borrowed: true}
	if err := s.Ping(ctx); err != nil {
		return nil, fmt.Errorf("open %s database: %w", d.name, err)
	}
	return s, nil
}

// KnownDialect reports whether OpenDB accepts the dialect name.
func KnownDialect(name string) bool { return dialectNamed(name) != nil }

func dialectNamed(name string) *dialect {
	switch strings.ToLower(name) {
	case "postgres", "postgresql", "pgx", "pq":
		return postgres
	case "sqlite", "sqlite3":
		return sqlite
	}
	return nil
}

// beginTxx begins a transaction on pool; on a borrowed Postgres handle it
// first sets the transaction's time zone to UTC, which the timestamps of
// the queries assume (Open sets it for the whole session).
func (s *Store) beginTxx(ctx context.Context, pool *sqlx.DB, opts *sql.TxOptions) (*sqlx.Tx, error) {
	tx, err := pool.BeginTxx(ctx, opts)
	if err != nil || !s.borrowed || s.d != postgres {
		return tx, err
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL TIME ZONE 'UTC'"); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// beginTx is beginTxx for the batch writes, which run on database/sql's
// transaction.
func (s *Store) beginTx(ctx context.Context, pool *sqlx.DB, opts *sql.TxOptions) (*sql.Tx, error) {
	tx, err := s.beginTxx(ctx, pool, opts)
	if err != nil {
		return nil, err
	}
	return tx.Tx, nil
}

// Close closes the connection pools, but not a handle given to OpenDB.
func (s *Store) Close() error {
	if s.borrowed {
		return nil
	}
	err := s.db.Close()
	if s.rd != s.db {
		err = errors.Join(err, s.rd.Close())
	}
	return err
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Ready reports whether the database answers and its schema is current.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.Ping(ctx); err != nil {
		return err
	}
	return s.checkSchema(ctx)
}
