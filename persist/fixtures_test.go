package persist

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// inc1 and inc2 are two incarnations of a session id (create times in µs).
var (
	inc1 = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC).UnixMicro()
	inc2 = inc1 + 3_600_000_000
)

func skey(id string) base.SessionRef { return base.SessionRef{App: "app", User: "u1", ID: id} }

// eventTime is the timestamp of event seq of incarnation inc: strictly
// increasing, with all six fractional digits used.
func eventTime(inc, seq int64) time.Time {
	return time.UnixMicro(inc + seq*1_000_111).UTC()
}

// eventID names event seq of incarnation inc.
func eventID(inc, seq int64) string { return fmt.Sprintf("e%d-%d", inc%100000, seq) }

// storageJSON is an event in ADK's storage form, with stale id, invocation
// id and timestamp that Apply must overwrite.
func storageJSON(seq int64) []byte {
	return fmt.Appendf(nil, `{"author":"model","content":{"role":"model","parts":[{"text":"reply %d <b>&</b> é"},`+
		`{"function_call":{"name":"f","args":{"camelKey":1}}}]},"invocation_id":"stale","id":"stale",`+
		`"actions":{"state_delta":{"app:a":%d,"user:u":"x","k":null},"artifact_delta":{},`+
		`"requested_auth_configs":{},"requested_tool_confirmations":{}},"timestamp":1.5,"custom_metadata":{"x y":[1, 2]}}`, seq, seq)
}

// upsert is a snapshot of incarnation inc of k after event to, carrying
// events from..to.
func upsert(k base.SessionRef, inc, from, to int64) SessionUpsert {
	u := SessionUpsert{
		Key: k, Incarnation: inc, Rev: to, Flushed: to, // Redis's numbering is the database's
		State:      map[string]json.RawMessage{"count": json.RawMessage(fmt.Sprint(to)), "gone": json.RawMessage("null")},
		CreateTime: time.UnixMicro(inc).UTC(),
		UpdateTime: time.UnixMicro(inc).UTC(),
	}
	for seq := from; seq <= to; seq++ {
		if seq == 0 {
			continue
		}
		u.Events = append(u.Events, EventRow{
			ID: eventID(inc, seq), InvocationID: fmt.Sprintf("inv-%d", (seq+1)/2),
			Timestamp: eventTime(inc, seq), Seq: seq, Data: storageJSON(seq),
		})
		u.UpdateTime = eventTime(inc, seq)
	}
	return u
}

func state(rev int64) map[string]json.RawMessage {
	return map[string]json.RawMessage{"rev": json.RawMessage(fmt.Sprint(rev)), "nil": json.RawMessage("null")}
}

// dump returns every row of every table, as sorted text lines per table.
func dump(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range []string{"adk_internal_metadata", "app_states", "user_states", "sessions", "events",
		"adksession_sessions", "adksession_states", "adksession_schema_migrations"} {
		rows, err := s.db.Query("SELECT * FROM " + table)
		must(t, err)
		cols, err := rows.Columns()
		must(t, err)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			must(t, rows.Scan(ptrs...))
			var line []string
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				line = append(line, fmt.Sprintf("%s=%v", cols[i], v))
			}
			out[table] = append(out[table], strings.Join(line, " "))
		}
		must(t, rows.Err())
		rows.Close()
		sort.Strings(out[table])
	}
	return out
}

func apply(t *testing.T, s *Store, b *Batch) {
	t.Helper()
	must(t, s.Apply(context.Background(), b))
}

// rawDB is what the test helpers use of a handle: a *sql.DB the test
// opened or a Store's *sqlx.DB.
type rawDB interface {
	Exec(query string, args ...any) (sql.Result, error)
	Query(query string, args ...any) (*sql.Rows, error)
}

// queryStrings returns the rows of a query whose columns all scan as text.
func queryStrings(t *testing.T, db rawDB, q string, args ...any) [][]string {
	t.Helper()
	rows, err := db.Query(q, args...)
	must(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	must(t, err)
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		must(t, rows.Scan(ptrs...))
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
		}
		out = append(out, row)
	}
	must(t, rows.Err())
	return out
}
