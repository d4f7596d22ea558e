package persist

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
)

// write runs the statements of p, one per table, each skipped when it has
// no rows.
func (s *Store) write(ctx context.Context, tx *sql.Tx, p *plan) error {
	if err := s.writeSessions(ctx, tx, p.purge, p.sessions, p.tracked); err != nil {
		return err
	}
	if err := s.writeEvents(ctx, tx, p, p.events); err != nil {
		return err
	}
	if err := s.writeSeeds(ctx, tx, p.ensureApps, p.ensureUsers); err != nil {
		return err
	}
	if err := s.writeStates(ctx, tx, false, p.appStates); err != nil {
		return err
	}
	if err := s.writeStates(ctx, tx, true, p.userStates); err != nil {
		return err
	}
	return s.writeStateRevs(ctx, tx, p.stateRevs)
}

// writeSessions deletes the purged sessions' rows, then upserts sessions
// rows and their bookkeeping (with the create-time state of the sessions
// whose upsert carries it).
func (s *Store) writeSessions(ctx context.Context, tx *sql.Tx, purge []base.SessionRef, sessions []*SessionUpsert, tracked []trackedRow) error {
	q := &s.d.q
	var c columns
	for _, k := range purge {
		c.add(0, k.App).add(1, k.User).add(2, k.ID)
	}
	if err := s.exec(ctx, tx, "delete sessions", q.purgeSessions, c.take(3)...); err != nil {
		return err
	}
	for _, u := range sessions {
		state, err := encodeState(u.State)
		if err != nil {
			return fmt.Errorf("%w: state of %s: %w", ErrInvalidBatch, u.Key, err)
		}
		c.add(0, u.Key.App).add(1, u.Key.User).add(2, u.Key.ID).addJSON(3, state).
			add(4, formatTime(u.CreateTime)).add(5, formatTime(u.UpdateTime))
	}
	if err := s.exec(ctx, tx, "upsert sessions", q.upsertSessions, c.take(6)...); err != nil {
		return err
	}
	creates := map[base.SessionRef]map[string]json.RawMessage{}
	written := map[base.SessionRef]int64{}
	for _, u := range sessions {
		if u.CreateState != nil {
			creates[u.Key] = u.CreateState
		}
		written[u.Key] = u.UpdateTime.UnixMicro()
	}
	var incs, revs, wuts []int64
	var deleted []bool
	for _, t := range tracked {
		create := ""
		if cs, ok := creates[t.key]; ok && !t.deleted {
			state, err := encodeState(cs)
			if err != nil {
				return fmt.Errorf("%w: create-time state of %s: %w", ErrInvalidBatch, t.key, err)
			}
			create = state
		}
		c.add(0, t.key.App).add(1, t.key.User).add(2, t.key.ID).add(3, create)
		wut, ok := written[t.key]
		switch {
		case t.deleted && t.deletedAt > 0:
			wut = t.deletedAt // a tombstone records its delete time
		case !ok || t.deleted:
			wut = -1 // kept as it is
		}
		incs, revs, deleted, wuts = append(incs, t.incarnation), append(revs, t.rev), append(deleted, t.deleted), append(wuts, wut)
	}
	return s.exec(ctx, tx, "track sessions", q.trackSessions, append(c.take(4), incs, revs, deleted, wuts)...)
}

// writeEvents inserts events rows (existing ones are left alone). When
// the database holds some of them already (fewer rows inserted than
// events), each one it holds with other content is another event under
// a reused id: it is recorded in p.conflicts (the database keeps its own).
// A replay's, held as they are, are not; the sessions a rebase read are
// told apart there already (rebaseTx), this covers every other path.
func (s *Store) writeEvents(ctx context.Context, tx *sql.Tx, p *plan, events []EventRow) error {
	var c columns
	for _, e := range events {
		data, err := eventjson.WithColumns(e.Data, e.ID, e.InvocationID, e.Timestamp)
		if err != nil {
			return fmt.Errorf("%w: event %q of %s: %w", ErrInvalidBatch, e.ID, e.Key, err)
		}
		c.add(0, e.Key.App).add(1, e.Key.User).add(2, e.Key.ID).add(3, e.ID).
			add(4, e.InvocationID).add(5, formatTime(e.Timestamp)).addJSON(6, string(data))
	}
	if len(events) == 0 {
		return nil
	}
	args, err := s.d.bind(c.take(7)...)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.d.q.insertEvents, args...)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n >= int64(len(events)) {
		return nil // all inserted (or not counted: as before)
	}
	bySession := map[base.SessionRef][]EventRow{}
	for _, e := range events {
		bySession[e.Key] = append(bySession[e.Key], e)
	}
	for _, k := range sortedKeys(bySession, compareSessionKeys) {
		err := readHeld(ctx, tx, s.d, k, bySession[k], func(id string, _ time.Time, stored []byte) {
			for _, e := range bySession[k] {
				if e.ID == id && !sameEventAnyTime(stored, e) {
					p.conflicts = appendConflict(p.conflicts, k, e, 0, ReasonReusedID)
				}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// writeSeeds creates the {} app_states and user_states rows that are missing.
func (s *Store) writeSeeds(ctx context.Context, tx *sql.Tx, apps, users []stateSeed) error {
	q := &s.d.q
	var c columns
	for _, a := range apps {
		c.add(0, a.key.app).add(1, formatTime(a.time))
	}
	if err := s.exec(ctx, tx, "create app states", q.ensureAppStates, c.take(2)...); err != nil {
		return err
	}
	for _, u := range users {
		c.add(0, u.key.app).add(1, u.key.user).add(2, formatTime(u.time))
	}
	return s.exec(ctx, tx, "create user states", q.ensureUserStates, c.take(3)...)
}

// writeStates upserts app_states rows (users false, UserID ignored) or
// user_states rows.
func (s *Store) writeStates(ctx context.Context, tx *sql.Tx, users bool, states []*StateUpsert) error {
	var c columns
	for _, u := range states {
		state, err := encodeState(u.State)
		if err != nil {
			return fmt.Errorf("%w: state of %s: %w", ErrInvalidBatch, stateName(u.AppName, u.UserID), err)
		}
		c.add(0, u.AppName)
		n := 1 // the state's column
		if users {
			c.add(1, u.UserID)
			n = 2
		}
		c.addJSON(n, state).add(n+1, formatTime(u.UpdateTime))
	}
	if users {
		return s.exec(ctx, tx, "upsert user states", s.d.q.upsertUserStates, c.take(4)...)
	}
	return s.exec(ctx, tx, "upsert app states", s.d.q.upsertAppStates, c.take(3)...)
}

// writeStateRevs records the revisions of the state rows written.
func (s *Store) writeStateRevs(ctx context.Context, tx *sql.Tx, stateRevs []stateRev) error {
	var c columns
	var revs, flushes []int64
	var orders []string
	for _, r := range stateRevs {
		c.add(0, r.key.app).add(1, r.key.user)
		revs, flushes = append(revs, r.rev), append(flushes, r.flushes)
		o := ""
		if r.orders != nil {
			b, err := json.Marshal(r.orders)
			if err != nil {
				return fmt.Errorf("%w: key orders of %s: %w", ErrInvalidBatch, stateName(r.key.app, r.key.user), err)
			}
			o = string(b)
		}
		orders = append(orders, o)
	}
	return s.exec(ctx, tx, "track states", s.d.q.trackStates, append(c.take(2), revs, flushes, orders)...)
}

// stateName names an app's state (user "") or a user's in messages.
func stateName(app, user string) string {
	if user == "" {
		return fmt.Sprintf("app %q", app)
	}
	return fmt.Sprintf("user %q of app %q", user, app)
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
