package persist

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/adksession/adksession/cache/base"
)

// countingConnector counts the statements run on its connections.
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

// conn is what both drivers' connections implement.
type conn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
}

type countingConn struct {
	conn
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{cn.(conn), c.n}, nil
}

func (c countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.conn.ExecContext(ctx, q, args)
}

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.conn.QueryContext(ctx, q, args)
}

// dsnConnector opens connections of drv to dsn.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

// bigBatch is 50 new sessions of 10 events each.
func bigBatch(round int64) *Batch {
	b := &Batch{}
	for i := range 50 {
		k := base.SessionRef{App: "app", User: fmt.Sprint("u", i%5), ID: fmt.Sprint("s", i)}
		b.Sessions = append(b.Sessions, upsert(k, inc1, round*10+1, round*10+10))
	}
	return b
}

func TestApplyStatementCount(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, u := migratedAt(t, b)
		var n atomic.Int64
		var c driver.Connector
		if s.d.name == "postgres" {
			pc, err := pq.NewConnector(u)
			must(t, err)
			c = pc
		} else {
			w, _, err := sqliteDSNs(u)
			must(t, err)
			c = dsnConnector{s.db.Driver(), w}
		}
		db := sql.OpenDB(countingConnector{c, &n})
		defer db.Close()
		x := sqlx.NewDb(db, s.d.bindDriver)
		cs := &Store{d: s.d, db: x, rd: x}
		ctx := context.Background()

		must(t, cs.Apply(ctx, bigBatch(0)))
		// Postgres: lock keys, lock sessions rows, read bookkeeping,
		// sessions, events, bookkeeping, app {} rows, user {} rows. SQLite:
		// the same, no locks.
		want := map[string]int64{"postgres": 8, "sqlite": 6}[s.d.name]
		same(t, "statements for 500 events in 50 sessions", n.Load(), want)
		same(t, "events", queryStrings(t, db, `SELECT count(*) FROM events`), [][]string{{"500"}})

		n.Store(0)
		b2 := bigBatch(1)
		b2.Deletes = []SessionDelete{{base.SessionRef{App: "app", User: "u0", ID: "s0"}, inc1, 0}}
		b2.AppStates = []StateUpsert{{AppName: "app", Rev: 1, State: state(1)}}
		b2.UserStates = []StateUpsert{{AppName: "app", UserID: "u1", Rev: 1, State: state(1)}}
		must(t, cs.Apply(ctx, b2))
		// + state bookkeeping read, the app row read for the key-by-key merge, delete, app and user
		// state, state bookkeeping.
		same(t, "statements with a delete and states", n.Load(), want+6)
		t.Logf("%s: %d statements for 500 events in 50 sessions", s.d.name, want)
	})
}
