package persist

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/adksession/adksession/cache/base"
)

// Window selects events: those with timestamp >= After (zero: no bound),
// then the newest NumRecentEvents of those (0: all).
type Window struct {
	NumRecentEvents int
	After           time.Time
}

// LoadedSession is a session as the database holds it.
type LoadedSession struct {
	Key base.SessionRef
	// Incarnation and Rev come from adksession's bookkeeping; for a session
	// that ADK itself wrote they are its create time in microseconds and its
	// number of events.
	Incarnation, Rev       int64
	State                  map[string]json.RawMessage // session-scoped keys
	AppState, UserState    map[string]json.RawMessage // keys without prefix; {} when no row
	CreateTime, UpdateTime time.Time
	// Events are the window's events, oldest first, with Seq filled in
	// (Rev minus the number of newer events in the session).
	Events []EventRow
}

// readTx is how every load reads: one consistent snapshot.
var readTx = &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}

// sessionColumns, sessionFrom and sessionLive read sessions rows with their
// bookkeeping, into a sessionRow.
const (
	sessionColumns = `s.state, s.create_time, s.update_time, t.incarnation, ` + sessionRevColumn + ` AS rev`
	sessionFrom    = `FROM sessions AS s
LEFT JOIN adksession_sessions AS t
  ON t.app_name = s.app_name AND t.user_id = s.user_id AND t.session_id = s.id`
	sessionLive = `(t.deleted IS NULL OR NOT t.deleted)`
)

// sessionRevColumn is the rev of a session row: its bookkeeping's, or, for
// a session that ADK wrote (no bookkeeping row), its number of events,
// counted only for such rows.
const sessionRevColumn = `COALESCE(t.rev, (SELECT count(*) FROM events AS e
    WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id))`

// LoadSession reads a session, its app and user state and the events of
// window w in one snapshot. It returns base.ErrNotFound when the database has no
// such session.
func (s *Store) LoadSession(ctx context.Context, key base.SessionRef, w Window) (*LoadedSession, error) {
	return s.loadSession(ctx, key, w, true, nil)
}

// LoadSessionEvents is LoadSession without the app's and the user's state
// (AppState and UserState nil): what a cold read puts back into Redis,
// where those states have hashes of their own, read apart. prepare, when
// not nil, fills in the events' Prepared as they come in.
func (s *Store) LoadSessionEvents(ctx context.Context, key base.SessionRef, w Window, prepare Prepare) (*LoadedSession, error) {
	return s.loadSession(ctx, key, w, false, prepare)
}

func (s *Store) loadSession(ctx context.Context, key base.SessionRef, w Window, states bool, prepare Prepare) (*LoadedSession, error) {
	tx, err := s.beginTxx(ctx, s.rd, readTx)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	defer tx.Rollback()
	ls, err := loadSessionRow(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	if states {
		if ls.AppState, _, err = loadState(ctx, tx, appStateQuery, key.App); err != nil {
			return nil, fmt.Errorf("load %s: app state: %w", key, err)
		}
		if ls.UserState, _, err = loadState(ctx, tx, userStateQuery, key.App, key.User); err != nil {
			return nil, fmt.Errorf("load %s: user state: %w", key, err)
		}
	}
	if ls.Events, err = s.loadEvents(ctx, tx, key, w, ls.Rev, 0, prepare); err != nil {
		return nil, fmt.Errorf("load %s: %w", key, err)
	}
	if n := len(ls.Events); n > 0 && ls.Events[n-1].Seq > ls.Rev {
		// loadEvents found more events than the rev counts and numbered
		// them by counting: the session's rev is theirs, or Redis would be
		// handed a newest event above its rev (hydrate.lua refuses it:
		// simulation seed 611470501151, a row ADK wrote to over a batch).
		ls.Rev = ls.Events[n-1].Seq
	}
	return ls, nil
}

// LoadEvents reads the events of window w that are older than seq beforeSeq
// (0: no bound), oldest first. It returns base.ErrNotFound when the database has
// no such session.
func (s *Store) LoadEvents(ctx context.Context, key base.SessionRef, w Window, beforeSeq int64) ([]EventRow, error) {
	tx, err := s.beginTxx(ctx, s.rd, readTx)
	if err != nil {
		return nil, fmt.Errorf("load events of %s: %w", key, err)
	}
	defer tx.Rollback()
	ls, err := loadSessionRow(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("load events of %s: %w", key, err)
	}
	events, err := s.loadEvents(ctx, tx, key, w, ls.Rev, beforeSeq, nil)
	if err != nil {
		return nil, fmt.Errorf("load events of %s: %w", key, err)
	}
	return events, nil
}

func loadSessionRow(ctx context.Context, q sqlx.QueryerContext, key base.SessionRef) (*LoadedSession, error) {
	var r struct {
		sessionRow
		Written sql.NullInt64 `db:"written_update"`
	}
	err := sqlx.GetContext(ctx, q, &r, `SELECT `+sessionColumns+`, t.written_update AS written_update `+sessionFrom+`
WHERE s.app_name = $1 AND s.user_id = $2 AND s.id = $3 AND `+sessionLive,
		key.App, key.User, key.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, base.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	sum := r.summary(key)
	if r.Written.Valid && r.Written.Int64 != sum.UpdateTime.UnixMicro() {
		// Someone else (ADK) wrote the session since adksession did: its
		// events are numbered by counting them, not from the rev adksession
		// recorded (docs/design.md, "Redis behind the database").
		if sum.Rev, err = countEvents(ctx, q, key); err != nil {
			return nil, err
		}
	}
	return &LoadedSession{Key: key, Incarnation: sum.Incarnation, Rev: sum.Rev, State: sum.State,
		CreateTime: sum.CreateTime, UpdateTime: sum.UpdateTime}, nil
}

// countEvents counts the events the database holds of session key.
func countEvents(ctx context.Context, q sqlx.QueryerContext, key base.SessionRef) (int64, error) {
	var n int64
	err := sqlx.GetContext(ctx, q, &n, `SELECT count(*) FROM events WHERE app_name = $1 AND user_id = $2 AND session_id = $3`,
		key.App, key.User, key.ID)
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return n, nil
}

// sessionRow receives sessionColumns.
type sessionRow struct {
	State       stateColumn   `db:"state"`
	Created     dbTime        `db:"create_time"`
	Updated     dbTime        `db:"update_time"`
	Incarnation sql.NullInt64 `db:"incarnation"` // NULL: ADK wrote the session
	Rev         int64         `db:"rev"`
}

func (r *sessionRow) summary(key base.SessionRef) SessionSummary {
	inc := r.Incarnation.Int64
	if !r.Incarnation.Valid {
		inc = r.Created.t.UnixMicro()
	}
	return SessionSummary{Key: key, Incarnation: inc, Rev: r.Rev, State: r.State,
		CreateTime: r.Created.t, UpdateTime: r.Updated.t}
}

const (
	appStateQuery = `SELECT a.state, t.rev, t.flushes FROM app_states AS a
LEFT JOIN adksession_states AS t ON t.app_name = a.app_name AND t.user_id = ''
WHERE a.app_name = $1`
	userStateQuery = `SELECT u.state, t.rev, t.flushes FROM user_states AS u
LEFT JOIN adksession_states AS t ON t.app_name = u.app_name AND t.user_id = u.user_id
WHERE u.app_name = $1 AND u.user_id = $2`
)

// StateVersion is what the database records of a user's or an app's state
// row: its rev, and the flush count of the Redis hash it was read from
// (StateUpsert.Flush); both 0 when untracked.
type StateVersion struct{ Rev, Flushes int64 }

// LoadUserState reads a user's state (keys without the user: prefix; {}
// when there is no row) and its version.
func (s *Store) LoadUserState(ctx context.Context, app, user string) (map[string]json.RawMessage, StateVersion, error) {
	var r stateRow
	err := sqlx.GetContext(ctx, s.rd, &r, userStateQuery, app, user)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]json.RawMessage{}, StateVersion{}, nil
	}
	if err != nil {
		return nil, StateVersion{}, fmt.Errorf("load user state of %q: %w", user, err)
	}
	return r.State, StateVersion{Rev: r.Rev.Int64, Flushes: r.Flushes.Int64}, nil
}

// LoadAppState reads an app's state (keys without the app: prefix; {} when
// there is no row) and its rev (0 when untracked).
func (s *Store) LoadAppState(ctx context.Context, app string) (map[string]json.RawMessage, int64, error) {
	state, rev, err := loadState(ctx, s.rd, appStateQuery, app)
	if err != nil {
		return nil, 0, fmt.Errorf("load app state of %q: %w", app, err)
	}
	return state, rev, nil
}

// stateRow receives appStateQuery and userStateQuery.
type stateRow struct {
	State   stateColumn   `db:"state"`
	Rev     sql.NullInt64 `db:"rev"` // NULL: untracked
	Flushes sql.NullInt64 `db:"flushes"`
}

func loadState(ctx context.Context, q sqlx.QueryerContext, query string, args ...any) (map[string]json.RawMessage, int64, error) {
	var r stateRow
	err := sqlx.GetContext(ctx, q, &r, query, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return map[string]json.RawMessage{}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return r.State, r.Rev.Int64, nil
}
