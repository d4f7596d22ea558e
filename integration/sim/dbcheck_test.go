package sim

// The database, row for row: after a complete flush, Postgres holds exactly
// the model's sessions, events (with event_data in ADK's storage form),
// user_states and app_states.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"

	"github.com/adksession/adksession/integration/testenv"
)

type dbSession struct {
	State              map[string]any
	CreateUS, UpdateUS int64
}

type dbEvent struct {
	ID, Inv string
	US      int64
	Data    map[string]any
	Raw     string
}

// usExpr reads a timestamp column as exact µs since the epoch, UTC.
func usExpr(col string) string {
	return fmt.Sprintf(`(extract(epoch FROM %s) * 1000000)::bigint`, col)
}

func queryRows(ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func unmarshalMap(b []byte) (map[string]any, error) {
	var m map[string]any
	err := json.Unmarshal(b, &m)
	return m, err
}

// checkDB compares every row of the ADK tables with the model.
func (d *driver) checkDB(ctx context.Context, _ *rand.Rand) []string {
	db := d.e.db
	sessions := map[sessKey]dbSession{}
	events := map[sessKey][]dbEvent{}
	users := map[userKey]map[string]any{}
	apps := map[string]map[string]any{}
	err := queryRows(ctx, db, `SELECT app_name, user_id, id, state, `+usExpr("create_time")+`, `+usExpr("update_time")+` FROM sessions`,
		func(rows *sql.Rows) error {
			var k sessKey
			var st []byte
			var s dbSession
			if err := rows.Scan(&k.App, &k.User, &k.SID, &st, &s.CreateUS, &s.UpdateUS); err != nil {
				return err
			}
			var err error
			s.State, err = unmarshalMap(st)
			sessions[k] = s
			return err
		})
	if err == nil {
		err = queryRows(ctx, db, `SELECT app_name, user_id, session_id, id, invocation_id, `+usExpr(`"timestamp"`)+`, event_data
FROM events ORDER BY app_name, user_id, session_id, "timestamp"`, func(rows *sql.Rows) error {
			var k sessKey
			var e dbEvent
			var data []byte
			if err := rows.Scan(&k.App, &k.User, &k.SID, &e.ID, &e.Inv, &e.US, &data); err != nil {
				return err
			}
			var err error
			e.Data, err = unmarshalMap(data)
			e.Raw = string(data)
			events[k] = append(events[k], e)
			return err
		})
	}
	if err == nil {
		err = queryRows(ctx, db, `SELECT app_name, user_id, state FROM user_states`, func(rows *sql.Rows) error {
			var k userKey
			var st []byte
			if err := rows.Scan(&k.App, &k.User, &st); err != nil {
				return err
			}
			var err error
			users[k], err = unmarshalMap(st)
			return err
		})
	}
	if err == nil {
		err = queryRows(ctx, db, `SELECT app_name, state FROM app_states`, func(rows *sql.Rows) error {
			var app string
			var st []byte
			if err := rows.Scan(&app, &st); err != nil {
				return err
			}
			var err error
			apps[app], err = unmarshalMap(st)
			return err
		})
	}
	if err != nil {
		return []string{fmt.Sprintf("read the database: %v", err)}
	}

	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	var diffs []string
	for k, s := range d.m.Sessions {
		row, ok := sessions[k]
		delete(sessions, k)
		if !ok {
			diffs = append(diffs, fmt.Sprintf("db: session %v has no row", k))
			continue
		}
		want := dbSession{State: s.state(), CreateUS: s.Inc, UpdateUS: s.updateTime()}
		if !reflect.DeepEqual(row, want) && !d.m.rowAllowed(k, s, row, want) {
			diffs = append(diffs, fmt.Sprintf("db: sessions row of %v: %s, want %s", k, js(row), js(want)))
		}
		rows := events[k]
		delete(events, k)
		if len(rows) != len(s.Events) {
			diffs = append(diffs, fmt.Sprintf("db: %d events rows of %v, want %d", len(rows), k, len(s.Events)))
			continue
		}
		for i, e := range s.Events {
			for _, df := range diffEventRow(e, rows[i]) {
				diffs = append(diffs, fmt.Sprintf("db: event %d of %v: %s", i, k, df))
			}
		}
	}
	for k := range sessions {
		diffs = append(diffs, fmt.Sprintf("db: sessions row of %v, which is not live", k))
	}
	for k, rows := range events {
		diffs = append(diffs, fmt.Sprintf("db: %d events rows of %v, which is not live", len(rows), k))
	}
	for k, st := range users {
		// A user that never had a session may have an empty row: reading its
		// state or listing it puts an empty user hash into Redis, which the
		// flush of a delete of one of its (never created) sessions writes.
		// The contract says when rows must exist, not that no other may.
		if _, ok := d.m.Users[k]; !ok && len(st) == 0 {
			delete(users, k)
		}
	}
	for _, df := range scopeRowsDiff(d.m, users, d.m.Users, func(u userKey) string { return "user/" + u.App + "/" + u.User + "/" }) {
		diffs = append(diffs, "db: user_states "+df)
	}
	for _, df := range scopeRowsDiff(d.m, apps, d.m.Apps, func(a string) string { return "app/" + a + "/" }) {
		diffs = append(diffs, "db: app_states "+df)
	}
	return diffs
}

// scopeRowsDiff compares the rows of a scope (user_states keyed by
// userKey, app_states by app name) with the model's, key by key; a loose key
// (Redis regressed behind the database, Model.Loose) may hold any value it
// may read as. prefix names a row's written keys. Called with m.mu held.
func scopeRowsDiff[K comparable](m *Model, got, want map[K]map[string]any, prefix func(K) string) []string {
	var diffs []string
	rows := map[K]bool{}
	for k := range got {
		rows[k] = true
	}
	for k := range want {
		rows[k] = true
	}
	for row := range rows {
		g, w := got[row], want[row]
		for _, key := range sortedKeys(g, w) {
			gv, gok := g[key]
			wv, wok := w[key]
			if gok == wok && reflect.DeepEqual(gv, wv) || m.looseValue(prefix(row)+key, gv, gok) {
				continue
			}
			diffs = append(diffs, fmt.Sprintf("%v %q: %s (present %v), want %s (present %v)", row, key, js(gv), gok, js(wv), wok))
		}
		if _, ok := got[row]; !ok {
			diffs = append(diffs, fmt.Sprintf("%v: no row", row))
		}
	}
	sort.Strings(diffs)
	return diffs
}

// diffEventRow checks an events row: the columns, and event_data in ADK's
// storage form (snake_case keys, timestamp in epoch ms, the four actions
// maps, state_delta with prefixes and without temp:) carrying the same values.
func diffEventRow(e *mEvent, g dbEvent) []string {
	var d []string
	if g.ID != e.ID || g.Inv != e.Inv || g.US != e.Ts {
		return []string{fmt.Sprintf("columns %q/%q/%d, want %q/%q/%d", g.ID, g.Inv, g.US, e.ID, e.Inv, e.Ts)}
	}
	x := g.Data
	if e.ADK {
		// As ADK Python wrote it: its own form (timestamp in seconds).
		actions, _ := x["actions"].(map[string]any)
		if got := actions["state_delta"]; !reflect.DeepEqual(got, jsonRound(nonNil(e.Delta))) {
			d = append(d, fmt.Sprintf("ADK's event_data.actions.state_delta %s, want %s", js(got), js(e.Delta)))
		}
		return d
	}
	if x["id"] != e.ID || x["invocation_id"] != e.Inv || x["author"] != e.Author {
		d = append(d, fmt.Sprintf("event_data id/invocation_id/author %v/%v/%v", x["id"], x["invocation_id"], x["author"]))
	}
	if ms, ok := x["timestamp"].(float64); !ok || math.Abs(ms-float64(e.Ts)/1000) > 0.002 {
		d = append(d, fmt.Sprintf("event_data.timestamp %v, want %v ms", x["timestamp"], float64(e.Ts)/1000))
	}
	for k := range x {
		if strings.ToLower(k) != k {
			d = append(d, fmt.Sprintf("event_data key %q is not snake_case", k))
		}
	}
	actions, _ := x["actions"].(map[string]any)
	for _, k := range []string{"state_delta", "artifact_delta", "requested_auth_configs", "requested_tool_confirmations"} {
		if _, ok := actions[k]; !ok {
			d = append(d, fmt.Sprintf("event_data.actions has no %s: %s", k, g.Raw))
		}
	}
	if got := actions["state_delta"]; !reflect.DeepEqual(got, jsonRound(nonNil(e.Delta))) {
		d = append(d, fmt.Sprintf("event_data.actions.state_delta %s, want %s", js(got), js(e.Delta)))
	}
	if got := actions["artifact_delta"]; !reflect.DeepEqual(got, jsonRound(nonNil(e.Artifacts))) {
		d = append(d, fmt.Sprintf("event_data.actions.artifact_delta %s, want %s", js(got), js(e.Artifacts)))
	}
	if rb, _ := actions["rewind_before_invocation_id"].(string); rb != e.RewindBefore {
		d = append(d, fmt.Sprintf("event_data.actions.rewind_before_invocation_id %q, want %q", rb, e.RewindBefore))
	}
	var content any
	if len(e.Content) > 0 {
		if err := json.Unmarshal(e.Content, &content); err != nil {
			return append(d, err.Error())
		}
	}
	if !reflect.DeepEqual(normBytes(snakeKeys(content)), normBytes(x["content"])) {
		d = append(d, fmt.Sprintf("event_data.content %s, want %s", js(x["content"]), js(snakeKeys(content))))
	}
	return d
}

// snakeKeys is a content object with ADK's snake_case keys, free-form maps
// (function args and responses) kept as they are.
func snakeKeys(v any) any {
	return walkJSON(v, func(k string, val any) (string, any, bool) {
		return testenv.ToSnake(k), val, k != "args" && k != "response"
	})
}

// rowAllowed: the sessions row of k differs from want only where a regress
// left it a lost event's keys or time (Model.lostState). Called with m.mu
// held.
func (m *Model) rowAllowed(k sessKey, s *mSession, row, want dbSession) bool {
	if row.CreateUS != want.CreateUS || !s.updatedAt(row.UpdateUS) {
		return false
	}
	for _, key := range sortedKeys(want.State, row.State) {
		w, wok := want.State[key]
		g, gok := row.State[key]
		if wok && gok && reflect.DeepEqual(jsonRound(g), jsonRound(w)) {
			continue
		}
		if !m.looseValue(writtenKey(k, key), jsonRound(g), gok) {
			return false
		}
	}
	return true
}
