package persist

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The database side of a prune (service.Prune, docs/operations.md
// "Retention"): a keyset walk over the sessions' primary key that returns
// idle sessions in bounded batches, and one short transaction per batch
// that deletes those still as the walk read them. The caller fences them in
// Redis in between, so nothing can change them unseen.

// PruneCandidate is an idle session as the database holds it.
type PruneCandidate struct {
	Key SessionKey
	// Incarnation and Rev are the bookkeeping's; for a session ADK wrote
	// (Tracked false) its create time in µs and its number of events.
	Incarnation, Rev int64
	Tracked          bool
	UpdateTime       time.Time
}

// pruneQueries returns the dialect's prune statements.
func (s *Store) pruneQueries() *pruneQueries {
	if s.d == postgres {
		return &prunePostgres
	}
	return &pruneSQLite
}

// sessionsKeyOrder returns the columns of the sessions primary key in its
// order (ADK JS: id, app_name, user_id; ADK Python: app_name, user_id, id),
// so that the walk follows the key's index whoever created the table.
func (s *Store) sessionsKeyOrder(ctx context.Context) ([]string, error) {
	rows, err := s.rd.QueryContext(ctx, s.pruneQueries().primaryKey)
	if err != nil {
		return nil, fmt.Errorf("read the primary key of sessions: %w", err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("read the primary key of sessions: %w", err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the primary key of sessions: %w", err)
	}
	sorted := slices.Sorted(slices.Values(cols))
	if !slices.Equal(sorted, []string{"app_name", "id", "user_id"}) {
		return []string{"app_name", "user_id", "id"}, nil // not ADK's key: any order is correct
	}
	return cols, nil
}

// PruneWalk walks the idle sessions of a prune in primary-key order.
type PruneWalk struct {
	s *Store
	// first reads the first page, next the pages after a key (the keyset
	// condition is an index condition only when it is there unconditionally).
	first, next string
	order       []string // primary-key columns
	after       *SessionKey
	cutoff      string
	app         string
}

// IdleSessions starts a walk over the sessions not updated since cutoff
// (of app, or of every app when app is ""), in the order of the sessions
// primary key. Sessions whose bookkeeping says deleted are left out.
func (s *Store) IdleSessions(ctx context.Context, cutoff time.Time, app string) (*PruneWalk, error) {
	order, err := s.sessionsKeyOrder(ctx)
	if err != nil {
		return nil, err
	}
	cols := make([]string, len(order))
	params := make([]string, len(order))
	for i, c := range order {
		cols[i], params[i] = "s."+c, fmt.Sprintf("$%d", i+4)
	}
	list := strings.Join(cols, ", ")
	query := func(keyset string) string {
		return `SELECT s.app_name, s.user_id, s.id, s.create_time, s.update_time, t.incarnation, ` + sessionRevColumn + `
` + sessionFrom + `
WHERE ` + keyset + `s.update_time < $1 AND ($2 = '' OR s.app_name = $2) AND ` + sessionLive + `
ORDER BY ` + list + ` LIMIT $3`
	}
	return &PruneWalk{s: s, order: order, cutoff: formatTime(cutoff), app: app,
		first: query(""), next: query("(" + list + ") > (" + strings.Join(params, ", ") + ") AND ")}, nil
}

// sessionRevColumn is the rev of a session row: its bookkeeping's, or its
// number of events for a session ADK wrote.
const sessionRevColumn = `COALESCE(t.rev, (SELECT count(*) FROM events AS e
    WHERE e.app_name = s.app_name AND e.user_id = s.user_id AND e.session_id = s.id))`

// Next returns the next up to limit idle sessions; none at the end.
func (w *PruneWalk) Next(ctx context.Context, limit int) ([]PruneCandidate, error) {
	query, args := w.first, []any{w.cutoff, w.app, limit}
	if w.after != nil {
		byName := map[string]string{"app_name": w.after.AppName, "user_id": w.after.UserID, "id": w.after.SessionID}
		for _, c := range w.order {
			args = append(args, byName[c])
		}
		query = w.next
	}
	tx, err := w.s.beginTx(ctx, w.s.rd, readTx)
	if err != nil {
		return nil, fmt.Errorf("read idle sessions: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read idle sessions: %w", err)
	}
	defer rows.Close()
	var out []PruneCandidate
	for rows.Next() {
		var c PruneCandidate
		var created, updated dbTime
		var inc sql.NullInt64
		if err := rows.Scan(&c.Key.AppName, &c.Key.UserID, &c.Key.SessionID, &created, &updated, &inc, &c.Rev); err != nil {
			return nil, fmt.Errorf("read idle sessions: %w", err)
		}
		c.UpdateTime, c.Tracked = updated.t, inc.Valid
		c.Incarnation = inc.Int64
		if !c.Tracked {
			c.Incarnation = created.t.UnixMicro()
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read idle sessions: %w", err)
	}
	if len(out) > 0 {
		w.after = &out[len(out)-1].Key
	}
	return out, nil
}

// CountIdleSessions counts the sessions IdleSessions would walk (a scan of
// the sessions table: for a progress bar).
func (s *Store) CountIdleSessions(ctx context.Context, cutoff time.Time, app string) (int64, error) {
	tx, err := s.beginTx(ctx, s.rd, readTx)
	if err != nil {
		return 0, fmt.Errorf("count idle sessions: %w", err)
	}
	defer tx.Rollback()
	var n int64
	err = tx.QueryRowContext(ctx, `SELECT count(*) `+sessionFrom+`
WHERE s.update_time < $1 AND ($2 = '' OR s.app_name = $2) AND `+sessionLive, formatTime(cutoff), app).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count idle sessions: %w", err)
	}
	return n, nil
}

// PrunedSessions is what DeleteIdleSessions did with a batch.
type PrunedSessions struct {
	// Deleted are the sessions whose rows are gone (with their events and
	// bookkeeping); Changed those updated since the walk read them (kept);
	// Gone those the database no longer had.
	Deleted, Changed, Gone []SessionKey
	// Events and Bytes count the deleted events and the stored size of the
	// deleted JSON (event_data and session state).
	Events, Bytes int64
}

// DeleteIdleSessions deletes, in one transaction, the candidates whose
// rows are still as the walk read them (same update time, incarnation and
// revision): their sessions rows, events and bookkeeping. On Postgres it
// first takes the advisory locks Apply takes for those sessions, so no
// batch of the flusher writes them meanwhile; on SQLite the transaction
// holds the write lock. With dryRun it counts and deletes nothing.
func (s *Store) DeleteIdleSessions(ctx context.Context, cands []PruneCandidate, dryRun bool) (*PrunedSessions, error) {
	out := &PrunedSessions{}
	if len(cands) == 0 {
		return out, nil
	}
	pool, opts := s.db, (*sql.TxOptions)(nil)
	if dryRun {
		pool, opts = s.rd, readTx
	}
	tx, err := s.beginTx(ctx, pool, opts)
	if err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	defer tx.Rollback()
	var c columns
	if q := s.d.q.lockKeys; q != "" && !dryRun {
		keys := make([]string, len(cands))
		for i, cd := range cands {
			keys[i] = lockKey("s", cd.Key.AppName, cd.Key.UserID, cd.Key.SessionID)
		}
		if err := s.exec(ctx, tx, "lock sessions", q, keys); err != nil {
			return nil, fmt.Errorf("prune sessions: %w", err)
		}
	}
	now, stateBytes, err := s.recheck(ctx, tx, cands)
	if err != nil {
		return nil, err
	}
	for _, cd := range cands {
		row, ok := now[cd.Key]
		switch {
		case !ok:
			out.Gone = append(out.Gone, cd.Key)
		case !row.same(cd):
			out.Changed = append(out.Changed, cd.Key)
		default:
			out.Deleted = append(out.Deleted, cd.Key)
			out.Bytes += stateBytes[cd.Key]
			c.add(0, cd.Key.AppName).add(1, cd.Key.UserID).add(2, cd.Key.SessionID)
		}
	}
	if len(out.Deleted) == 0 {
		return out, nil
	}
	keys := c.take(3)
	args, err := s.d.bind(keys...)
	if err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	var eventBytes int64
	if err := tx.QueryRowContext(ctx, s.pruneQueries().eventSizes, args...).Scan(&out.Events, &eventBytes); err != nil {
		return nil, fmt.Errorf("prune sessions: count events: %w", err)
	}
	out.Bytes += eventBytes
	if dryRun {
		return out, nil
	}
	// The trigger deletes the sessions' events.
	if err := s.exec(ctx, tx, "delete sessions", s.d.q.purgeSessions, keys...); err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	if err := s.exec(ctx, tx, "delete bookkeeping", s.pruneQueries().untrack, keys...); err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("prune sessions: commit: %w", err)
	}
	return out, nil
}

// rechecked is a session row as DeleteIdleSessions reads it again.
type rechecked struct {
	updated  time.Time
	inc, rev sql.NullInt64
	deleted  sql.NullBool
}

// same reports whether the row is still what the walk read as c.
func (r rechecked) same(c PruneCandidate) bool {
	if !r.updated.Equal(c.UpdateTime) || r.inc.Valid != c.Tracked || (r.deleted.Valid && r.deleted.Bool) {
		return false
	}
	return !c.Tracked || (r.inc.Int64 == c.Incarnation && r.rev.Int64 == c.Rev)
}

// recheck reads the candidates' rows again, and the size of their state.
func (s *Store) recheck(ctx context.Context, tx *sql.Tx, cands []PruneCandidate) (map[SessionKey]rechecked, map[SessionKey]int64, error) {
	var c columns
	for _, cd := range cands {
		c.add(0, cd.Key.AppName).add(1, cd.Key.UserID).add(2, cd.Key.SessionID)
	}
	args, err := s.d.bind(c.take(3)...)
	if err != nil {
		return nil, nil, fmt.Errorf("prune sessions: %w", err)
	}
	rows, err := tx.QueryContext(ctx, s.pruneQueries().recheck, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("prune sessions: read them again: %w", err)
	}
	defer rows.Close()
	now, sizes := map[SessionKey]rechecked{}, map[SessionKey]int64{}
	for rows.Next() {
		var k SessionKey
		var r rechecked
		var updated dbTime
		var size sql.NullInt64
		if err := rows.Scan(&k.AppName, &k.UserID, &k.SessionID, &updated, &r.inc, &r.rev, &r.deleted, &size); err != nil {
			return nil, nil, fmt.Errorf("prune sessions: read them again: %w", err)
		}
		r.updated = updated.t
		now[k], sizes[k] = r, size.Int64
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("prune sessions: read them again: %w", err)
	}
	return now, sizes, nil
}
