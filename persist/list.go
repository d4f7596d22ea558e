package persist

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// SessionSummary is a session without its events.
type SessionSummary struct {
	Key                    base.SessionRef
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

// listColumns are what a listing reads of a session row, into a listRow:
// its key, its user's state, then sessionColumns.
const listColumns = `s.user_id, s.id, us.state AS user_state, ` + sessionColumns

// listUsers joins the user state of each session to sessionFrom.
const listUsers = ` LEFT JOIN user_states AS us ON us.app_name = s.app_name AND us.user_id = s.user_id`

// listRow receives listColumns.
type listRow struct {
	UserID    string      `db:"user_id"`
	SessionID string      `db:"id"`
	UserState stateColumn `db:"user_state"`
	sessionRow
}

// ListSessions returns up to limit sessions of app (every user), in
// (user id, session id) byte order, starting after the keyset cursor after
// (zero: from the start); deleted ones are left out. The next page starts
// after the last key returned. Byte order (COLLATE "C" on Postgres) is the
// order of Redis's app index, so that listings merge the two.
func (s *Store) ListSessions(ctx context.Context, app string, after base.SessionRef, limit int) (*Listing, error) {
	q, args := s.d.listQuery(app, after, limit)
	var rows []listRow
	if err := s.rd.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
	}
	out := &Listing{Users: map[string]map[string]json.RawMessage{}}
	for i := range rows {
		r := &rows[i]
		out.add(base.SessionRef{App: app, User: r.UserID, ID: r.SessionID}, &r.sessionRow, r.UserState)
	}
	return out, nil
}

// listQuery is the query of ListSessions and its arguments.
func (d *dialect) listQuery(app string, after base.SessionRef, limit int) (string, []any) {
	c := d.byteOrder
	q := `SELECT ` + listColumns + ` ` + sessionFrom + listUsers + `
WHERE s.app_name = ? AND ` + sessionLive
	args := []any{app}
	if after != (base.SessionRef{}) {
		args = append(args, after.User, after.ID)
		q += ` AND (s.user_id` + c + `, s.id` + c + `) > (?, ?)`
	}
	return d.rebind(q + ` ORDER BY s.user_id` + c + `, s.id` + c + ` LIMIT ?`), append(args, limit)
}

// ReadSessions reads, in one query, the sessions of app named by keys
// (those the database has and has not deleted) and the state of every user
// they name.
func (s *Store) ReadSessions(ctx context.Context, app string, keys []base.SessionRef) (*Listing, error) {
	out := &Listing{Users: map[string]map[string]json.RawMessage{}}
	if len(keys) == 0 {
		return out, nil
	}
	users, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		users[i], ids[i] = k.User, k.ID
	}
	args, err := s.d.bind(users, ids)
	if err != nil {
		return nil, err
	}
	q := `SELECT k.user_id, k.id, s.id IS NOT NULL AND ` + sessionLive + ` AS found, us.state AS user_state,
  ` + sessionColumns + `
FROM ` + s.d.pairs + `
LEFT JOIN user_states AS us ON us.app_name = $1 AND us.user_id = k.user_id
LEFT JOIN sessions AS s ON s.app_name = $1 AND s.user_id = k.user_id AND s.id = k.id
LEFT JOIN adksession_sessions AS t
  ON t.app_name = s.app_name AND t.user_id = s.user_id AND t.session_id = s.id`
	var rows []readRow
	if err := s.rd.SelectContext(ctx, &rows, q, append([]any{app}, args...)...); err != nil {
		return nil, fmt.Errorf("read sessions of app %q: %w", app, err)
	}
	for _, r := range rows {
		key := base.SessionRef{App: app, User: r.UserID, ID: r.SessionID}
		if !r.Found {
			out.addUser(key.User, r.UserState)
			continue
		}
		out.add(key, &sessionRow{State: r.State, Created: r.Created.V, Updated: r.Updated.V,
			Incarnation: r.Incarnation, Rev: r.Rev}, r.UserState)
	}
	return out, nil
}

// readRow receives a row of ReadSessions: a key named, whether the
// database has that session, its user's state and, when found,
// sessionColumns (the times are NULL otherwise).
type readRow struct {
	UserID      string           `db:"user_id"`
	SessionID   string           `db:"id"`
	Found       bool             `db:"found"`
	UserState   stateColumn      `db:"user_state"`
	State       stateColumn      `db:"state"`
	Created     sql.Null[dbTime] `db:"create_time"`
	Updated     sql.Null[dbTime] `db:"update_time"`
	Incarnation sql.NullInt64    `db:"incarnation"`
	Rev         int64            `db:"rev"`
}

func (l *Listing) add(key base.SessionRef, r *sessionRow, user stateColumn) {
	l.Sessions = append(l.Sessions, r.summary(key))
	l.addUser(key.User, user)
}

func (l *Listing) addUser(user string, state stateColumn) {
	if _, ok := l.Users[user]; !ok {
		l.Users[user] = state
	}
}

// SessionTime is a session id and its last update, for a user's index.
type SessionTime struct {
	SessionID  string
	UpdateTime time.Time
}

// SessionTimes returns the id and update time of every session of (app,
// user) that the database has and has not deleted, in no order.
func (s *Store) SessionTimes(ctx context.Context, app, user string) ([]SessionTime, error) {
	var rows []struct {
		SessionID string `db:"id"`
		Updated   dbTime `db:"update_time"`
	}
	if err := s.rd.SelectContext(ctx, &rows, s.d.timesQuery(), app, user); err != nil {
		return nil, fmt.Errorf("list sessions of user %q: %w", user, err)
	}
	out := make([]SessionTime, len(rows))
	for i, r := range rows {
		out[i] = SessionTime{SessionID: r.SessionID, UpdateTime: r.Updated.t}
	}
	return out, nil
}

// timesQuery is the query of SessionTimes.
func (d *dialect) timesQuery() string {
	return `SELECT s.id, s.update_time ` + sessionFrom + `
WHERE s.app_name = $1 AND s.user_id = $2 AND ` + sessionLive
}
