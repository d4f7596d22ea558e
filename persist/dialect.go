package persist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/adksession/adksession/cache/base"
)

// dialect is everything that differs between Postgres and SQLite: the text
// of the batch statements and how their columns are bound.
//
// Every batch statement takes whole columns at once, so a batch costs one
// statement per table whatever its size: Postgres gets one array parameter
// per column and reads them with unnest($1::text[], ...); SQLite gets one
// JSON array of rows and reads it with json_each($1).
type dialect struct {
	name string
	// bindDriver is the driver name that tells sqlx the dialect's
	// placeholders ($1 or ?), for sqlx.NewDb and Rebind.
	bindDriver string
	// bind turns columns (each a []string, jsonColumn, []int64 or []bool,
	// all of one length) into the statement's arguments.
	bind func(cols ...any) ([]any, error)
	// noLimit is the LIMIT argument that means no limit.
	noLimit any
	// byteOrder is the COLLATE clause that compares text byte by byte (the
	// order of Redis's app index), whatever the database's collation.
	byteOrder string
	// pairs is a FROM item k(user_id, id) over the two text columns that
	// bind binds from $2 on.
	pairs string
	// migrations is the directory of the dialect's migrations in migrationFS.
	migrations string
	// tableExists answers whether the table named $1 exists.
	tableExists string
	// jsonb: event_data is a jsonb column, whose values are valid JSON.
	jsonb bool
	// forUpdate ends a read of a row the batch then writes: it locks the
	// row against writers the batch's key locks do not hold off (ADK's),
	// so that what the batch decides on is what it writes over ("" when
	// the dialect's transactions already serialize).
	forUpdate string
	// viewQuery is LoadViewEvents's query and its arguments.
	viewQuery func(base.SessionRef, ViewQuery) (string, []any)
	q         batchQueries
}

// batchQueries are the statements of Apply and Migrate, in the order Apply
// runs them.
type batchQueries struct {
	lockMigrations   string // "" when the dialect's transactions already serialize
	lockKeys         string // "" when the dialect's transactions already serialize
	lockSessions     string // "" when the dialect's transactions already serialize
	readSessions     string
	readStates       string
	purgeSessions    string
	upsertSessions   string
	insertEvents     string
	trackSessions    string
	ensureAppStates  string
	upsertAppStates  string
	ensureUserStates string
	upsertUserStates string
	trackStates      string
}

// lockRow is the locking clause of a read of table (its name or alias) in
// a batch that then writes the rows read (forUpdate).
func (d *dialect) lockRow(table string) string {
	if d.forUpdate == "" {
		return ""
	}
	return d.forUpdate + " OF " + table
}

// rebind turns the ? placeholders of a query built by hand into the
// dialect's, so that it can add parameters without counting them.
func (d *dialect) rebind(q string) string {
	return sqlx.Rebind(sqlx.BindType(d.bindDriver), q)
}

// setCreateState is how trackSessions updates create_state (the same SQL
// on both dialects): a delete clears it, a batch that carries it sets it, a
// batch of the same incarnation without it keeps it, another incarnation
// without it clears it.
const setCreateState = `create_state = CASE
    WHEN EXCLUDED.deleted THEN NULL
    WHEN EXCLUDED.create_state IS NOT NULL THEN EXCLUDED.create_state
    WHEN adksession_sessions.incarnation = EXCLUDED.incarnation THEN adksession_sessions.create_state
  END`

// setWrittenUpdate is how trackSessions updates written_update (the same
// SQL on both dialects): an upsert records the update_time it wrote, a
// delete its own time (SessionDelete.At; -1 when unknown keeps the last one).
const setWrittenUpdate = `written_update = COALESCE(EXCLUDED.written_update, adksession_sessions.written_update)`

// jsonColumn is a column of JSON texts.
type jsonColumn []string

// bindArrays binds each column as a Postgres array, and a jsonColumn as one
// JSON array.
func bindArrays(cols ...any) ([]any, error) {
	args := make([]any, len(cols))
	for i, c := range cols {
		if j, ok := c.(jsonColumn); ok {
			args[i] = "[" + strings.Join(j, ",") + "]"
			continue
		}
		args[i] = pq.Array(c)
	}
	return args, nil
}

// bindJSONRows binds the columns as one JSON array of rows, the i-th row
// holding the i-th value of every column.
func bindJSONRows(cols ...any) ([]any, error) {
	n := columnLen(cols[0])
	rows := make([][]any, n)
	for i := range rows {
		row := make([]any, len(cols))
		for j, c := range cols {
			switch c := c.(type) {
			case []string:
				row[j] = c[i]
			case jsonColumn: // as text, so that SQLite stores every byte
				row[j] = c[i]
			case []int64:
				row[j] = c[i]
			case []bool:
				row[j] = c[i]
			default:
				return nil, fmt.Errorf("bind column of type %T", c)
			}
		}
		rows[i] = row
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rows); err != nil {
		return nil, fmt.Errorf("bind rows: %w", err)
	}
	return []any{b.String()}, nil
}

func columnLen(c any) int {
	switch c := c.(type) {
	case []string:
		return len(c)
	case jsonColumn:
		return len(c)
	case []int64:
		return len(c)
	case []bool:
		return len(c)
	}
	return 0
}
