package persist

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// write runs the statements of p, each skipped when it has no rows.
func (s *Store) write(ctx context.Context, tx *sql.Tx, p *plan) error {
	q := &s.d.q
	var c columns
	for _, k := range p.purge {
		c.add(0, k.AppName).add(1, k.UserID).add(2, k.SessionID)
	}
	if err := s.exec(ctx, tx, "delete sessions", q.purgeSessions, c.take(3)...); err != nil {
		return err
	}
	for _, u := range p.sessions {
		state, err := encodeState(u.State)
		if err != nil {
			return fmt.Errorf("%w: state of session %q: %w", ErrInvalidBatch, u.Key.SessionID, err)
		}
		c.add(0, u.Key.AppName).add(1, u.Key.UserID).add(2, u.Key.SessionID).addJSON(3, state).
			add(4, formatTime(u.CreateTime)).add(5, formatTime(u.UpdateTime))
	}
	if err := s.exec(ctx, tx, "upsert sessions", q.upsertSessions, c.take(6)...); err != nil {
		return err
	}
	for _, e := range p.events {
		data, err := storageEventData(e.Data, e.ID, e.InvocationID, e.Timestamp)
		if err != nil {
			return fmt.Errorf("%w: event %q of session %q: %w", ErrInvalidBatch, e.ID, e.Key.SessionID, err)
		}
		c.add(0, e.Key.AppName).add(1, e.Key.UserID).add(2, e.Key.SessionID).add(3, e.ID).
			add(4, e.InvocationID).add(5, formatTime(e.Timestamp)).addJSON(6, string(data))
	}
	if err := s.exec(ctx, tx, "insert events", q.insertEvents, c.take(7)...); err != nil {
		return err
	}
	var incs, revs []int64
	var deleted []bool
	for _, t := range p.tracked {
		c.add(0, t.key.AppName).add(1, t.key.UserID).add(2, t.key.SessionID)
		incs, revs, deleted = append(incs, t.incarnation), append(revs, t.rev), append(deleted, t.deleted)
	}
	if err := s.exec(ctx, tx, "track sessions", q.trackSessions, append(c.take(3), incs, revs, deleted)...); err != nil {
		return err
	}
	return s.writeStates(ctx, tx, p)
}

func (s *Store) writeStates(ctx context.Context, tx *sql.Tx, p *plan) error {
	q := &s.d.q
	var c columns
	for _, a := range p.ensureApps {
		c.add(0, a.key.app).add(1, formatTime(a.time))
	}
	if err := s.exec(ctx, tx, "create app states", q.ensureAppStates, c.take(2)...); err != nil {
		return err
	}
	for _, u := range p.ensureUsers {
		c.add(0, u.key.app).add(1, u.key.user).add(2, formatTime(u.time))
	}
	if err := s.exec(ctx, tx, "create user states", q.ensureUserStates, c.take(3)...); err != nil {
		return err
	}
	for _, a := range p.appStates {
		state, err := encodeState(a.State)
		if err != nil {
			return fmt.Errorf("%w: state of app %q: %w", ErrInvalidBatch, a.AppName, err)
		}
		c.add(0, a.AppName).addJSON(1, state).add(2, formatTime(a.UpdateTime))
	}
	if err := s.exec(ctx, tx, "upsert app states", q.upsertAppStates, c.take(3)...); err != nil {
		return err
	}
	for _, u := range p.userStates {
		state, err := encodeState(u.State)
		if err != nil {
			return fmt.Errorf("%w: state of user %q: %w", ErrInvalidBatch, u.UserID, err)
		}
		c.add(0, u.AppName).add(1, u.UserID).addJSON(2, state).add(3, formatTime(u.UpdateTime))
	}
	if err := s.exec(ctx, tx, "upsert user states", q.upsertUserStates, c.take(4)...); err != nil {
		return err
	}
	var revs []int64
	for _, r := range p.stateRevs {
		c.add(0, r.key.app).add(1, r.key.user)
		revs = append(revs, r.rev)
	}
	return s.exec(ctx, tx, "track states", q.trackStates, append(c.take(2), revs)...)
}

// exec binds cols and runs q, unless the columns are empty.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, what, q string, cols ...any) error {
	if columnLen(cols[0]) == 0 {
		return nil
	}
	args, err := s.d.bind(cols...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// columns collects text columns row by row.
type columns struct {
	cols [][]string
	json map[int]bool
}

func (c *columns) add(i int, v string) *columns {
	for len(c.cols) <= i {
		c.cols = append(c.cols, nil)
	}
	c.cols[i] = append(c.cols[i], v)
	return c
}

// addJSON adds v to column i, a column of JSON texts.
func (c *columns) addJSON(i int, v string) *columns {
	if c.json == nil {
		c.json = map[int]bool{}
	}
	c.json[i] = true
	return c.add(i, v)
}

// take returns the first n columns as bind arguments and resets c.
func (c *columns) take(n int) []any {
	out := make([]any, n)
	for i := range out {
		switch {
		case i >= len(c.cols):
			out[i] = []string(nil)
		case c.json[i]:
			out[i] = jsonColumn(c.cols[i])
		default:
			out[i] = c.cols[i]
		}
	}
	*c = columns{}
	return out
}

// encodeState encodes a state map as a JSON object, {} for nil; values are
// written as they are (null included), keys sorted.
func encodeState(m map[string]json.RawMessage) (string, error) {
	if m == nil {
		return "{}", nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte{'\n'})), nil
}
