package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// SessionSummary is a session without its events.
type SessionSummary struct {
	Key                    SessionKey
	Incarnation, Rev       int64 // as in LoadedSession
	State                  map[string]json.RawMessage
	CreateTime, UpdateTime time.Time
}

// Listing is what the database has of the sessions of one page of a
// listing: the sessions (without events) and the state of their users.
type Listing struct {
	Sessions []SessionSummary // in (user id, session id) byte order
	// Users holds the state of each user of the page (keys without the
	// "user:" prefix; {} when the user has no row).
	Users map[string]map[string]json.RawMessage
}

// listColumns are what a listing reads of a session row: its user's state,
// then sessionColumns.
const listColumns = `us.state, ` + sessionColumns

// listUsers joins the user state of each session to sessionFrom.
const listUsers = ` LEFT JOIN user_states AS us ON us.app_name = s.app_name AND us.user_id = s.user_id`

// ListSessions returns up to limit sessions of app (every user), in
// (user id, session id) byte order, starting after the keyset cursor after
// (zero: from the start); deleted ones are left out. The next page starts
// after the last key returned. Byte order (COLLATE "C" on Postgres) is the
// order of Redis's app index, so that listings merge the two.
func (s *Store) ListSessions(ctx context.Context, app string, after SessionKey, limit int) (*Listing, error) {
	q, args := s.d.listQuery(app, after, limit)
	rows, err := s.rd.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
	}
	defer rows.Close()
	out := &Listing{Users: map[string]map[string]json.RawMessage{}}
	for rows.Next() {
		key := SessionKey{AppName: app}
		var r sessionRow
		var user []byte
		if err := rows.Scan(append([]any{&key.UserID, &key.SessionID, &user}, r.dest()...)...); err != nil {
			return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
		}
		if err := out.add(key, &r, user); err != nil {
			return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
	}
	return out, nil
}

// listQuery is the query of ListSessions and its arguments.
func (d *dialect) listQuery(app string, after SessionKey, limit int) (string, []any) {
	c := d.byteOrder
	q := `SELECT s.user_id, s.id, ` + listColumns + ` ` + sessionFrom + listUsers + `
WHERE s.app_name = $1 AND ` + sessionLive
	args := []any{app}
	if after != (SessionKey{}) {
		args = append(args, after.UserID, after.SessionID)
		q += fmt.Sprintf(` AND (s.user_id%s, s.id%s) > ($2, $3)`, c, c)
	}
	args = append(args, limit)
	return q + fmt.Sprintf(` ORDER BY s.user_id%s, s.id%s LIMIT $%d`, c, c, len(args)), args
}

// ReadSessions reads, in one query, the sessions of app named by keys
// (those the database has and has not deleted) and the state of every user
// they name.
func (s *Store) ReadSessions(ctx context.Context, app string, keys []SessionKey) (*Listing, error) {
	out := &Listing{Users: map[string]map[string]json.RawMessage{}}
	if len(keys) == 0 {
		return out, nil
	}
	users, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		users[i], ids[i] = k.UserID, k.SessionID
	}
	args, err := s.d.bind(users, ids)
	if err != nil {
		return nil, err
	}
	q := `SELECT k.user_id, k.id, s.id IS NOT NULL AND ` + sessionLive + `, ` + listColumns + `
FROM ` + s.d.pairs + `
LEFT JOIN user_states AS us ON us.app_name = $1 AND us.user_id = k.user_id
LEFT JOIN sessions AS s ON s.app_name = $1 AND s.user_id = k.user_id AND s.id = k.id
LEFT JOIN adksession_sessions AS t
  ON t.app_name = s.app_name AND t.user_id = s.user_id AND t.session_id = s.id`
	rows, err := s.rd.QueryContext(ctx, q, append([]any{app}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
	}
	defer rows.Close()
	for rows.Next() {
		key := SessionKey{AppName: app}
		var found bool
		var user []byte
		var r sessionRow
		var created, updated nullTime
		if err := rows.Scan(&key.UserID, &key.SessionID, &found, &user, &r.state, &created, &updated, &r.inc, &r.rev); err != nil {
			return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
		}
		if !found {
			if err := out.addUser(key.UserID, user); err != nil {
				return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
			}
			continue
		}
		r.created, r.updated = created.dbTime, updated.dbTime
		if err := out.add(key, &r, user); err != nil {
			return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
	}
	return out, nil
}

func (l *Listing) add(key SessionKey, r *sessionRow, user []byte) error {
	sum, err := r.summary(key)
	if err != nil {
		return fmt.Errorf("session %q of user %q: %w", key.SessionID, key.UserID, err)
	}
	l.Sessions = append(l.Sessions, sum)
	return l.addUser(key.UserID, user)
}

func (l *Listing) addUser(user string, state []byte) error {
	if _, ok := l.Users[user]; ok {
		return nil
	}
	m, err := decodeState(state)
	if err != nil {
		return fmt.Errorf("state of user %q: %w", user, err)
	}
	l.Users[user] = m
	return nil
}

// nullTime scans a timestamp column of an outer join, NULL when the row is
// missing.
type nullTime struct {
	dbTime
	valid bool
}

// Scan implements sql.Scanner.
func (n *nullTime) Scan(v any) error {
	if n.valid = v != nil; !n.valid {
		return nil
	}
	return n.dbTime.Scan(v)
}

// SessionTime is a session id and its last update, for a user's index.
type SessionTime struct {
	SessionID  string
	UpdateTime time.Time
}

// SessionTimes returns the id and update time of every session of (app,
// user) that the database has and has not deleted, in no order.
func (s *Store) SessionTimes(ctx context.Context, app, user string) ([]SessionTime, error) {
	rows, err := s.rd.QueryContext(ctx, s.d.timesQuery(), app, user)
	if err != nil {
		return nil, fmt.Errorf("list sessions of user %q: %w", user, err)
	}
	defer rows.Close()
	var out []SessionTime
	for rows.Next() {
		var st SessionTime
		var t dbTime
		if err := rows.Scan(&st.SessionID, &t); err != nil {
			return nil, fmt.Errorf("list sessions of user %q: %w", user, err)
		}
		st.UpdateTime = t.t
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions of user %q: %w", user, err)
	}
	return out, nil
}

// timesQuery is the query of SessionTimes.
func (d *dialect) timesQuery() string {
	return `SELECT s.id, s.update_time ` + sessionFrom + `
WHERE s.app_name = $1 AND s.user_id = $2 AND ` + sessionLive
}
