package persist

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/adksession/adksession/cache/base"
)

// The database side of a prune (service.Prune, docs/operations.md
// "Retention"): a keyset walk over the sessions' primary key that returns
// idle sessions in bounded batches, and one short transaction per batch
// that deletes those still as the walk read them. The caller fences them in
// Redis in between, so nothing can change them unseen.

// PruneCandidate is an idle session as the database holds it.
type PruneCandidate struct {
	Key base.SessionRef
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
	var cols []string
	if err := s.rd.SelectContext(ctx, &cols, s.pruneQueries().primaryKey); err != nil {
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
	after       *base.SessionRef
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
	for i, c := range order {
		cols[i] = "s." + c
	}
	list := strings.Join(cols, ", ")
	query := func(keyset string) string {
		return s.d.rebind(`SELECT s.app_name, s.user_id, s.id AS session_id, s.create_time, s.update_time, t.incarnation,
  ` + sessionRevColumn + ` AS rev
` + sessionFrom + `
WHERE ` + keyset + `s.update_time < ? AND (? = '' OR s.app_name = ?) AND ` + sessionLive + `
ORDER BY ` + list + ` LIMIT ?`)
	}
	return &PruneWalk{s: s, order: order, cutoff: formatTime(cutoff), app: app,
		first: query(""), next: query("(" + list + ") > (" + strings.Repeat("?, ", len(order)-1) + "?) AND ")}, nil
}

// Next returns the next up to limit idle sessions; none at the end.
func (w *PruneWalk) Next(ctx context.Context, limit int) ([]PruneCandidate, error) {
	query, args := w.page(limit)
	tx, err := w.s.beginTxx(ctx, w.s.rd, readTx)
	if err != nil {
		return nil, fmt.Errorf("read idle sessions: %w", err)
	}
	defer tx.Rollback()
	var rows []keyedSessionRow
	if err := tx.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, fmt.Errorf("read idle sessions: %w", err)
	}
	out := make([]PruneCandidate, len(rows))
	for i, r := range rows {
		sum := r.summary(r.SessionRef)
		out[i] = PruneCandidate{Key: r.SessionRef, Incarnation: sum.Incarnation, Rev: sum.Rev,
			Tracked: r.Incarnation.Valid, UpdateTime: sum.UpdateTime}
	}
	if len(out) > 0 {
		w.after = &out[len(out)-1].Key
	}
	return out, nil
}

// page returns the query of the next page of up to limit sessions and its
// arguments.
func (w *PruneWalk) page(limit int) (string, []any) {
	if w.after == nil {
		return w.first, []any{w.cutoff, w.app, w.app, limit}
	}
	byName := map[string]string{"app_name": w.after.App, "user_id": w.after.User, "id": w.after.ID}
	var args []any
	for _, c := range w.order {
		args = append(args, byName[c])
	}
	return w.next, append(args, w.cutoff, w.app, w.app, limit)
}

// keyedSessionRow is a sessionRow with its key.
type keyedSessionRow struct {
	base.SessionRef
	sessionRow
}

// CountIdleSessions counts the sessions IdleSessions would walk (a scan of
// the sessions table: for a progress bar).
func (s *Store) CountIdleSessions(ctx context.Context, cutoff time.Time, app string) (int64, error) {
	tx, err := s.beginTxx(ctx, s.rd, readTx)
	if err != nil {
		return 0, fmt.Errorf("count idle sessions: %w", err)
	}
	defer tx.Rollback()
	var n int64
	err = tx.GetContext(ctx, &n, `SELECT count(*) `+sessionFrom+`
WHERE s.update_time < $1 AND ($2 = '' OR s.app_name = $2) AND `+sessionLive, formatTime(cutoff), app)
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
	Deleted, Changed, Gone []base.SessionRef
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
	tx, err := s.beginTxx(ctx, pool, opts)
	if err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	defer tx.Rollback()
	var c columns
	if q := s.d.q.lockKeys; q != "" && !dryRun {
		keys := make([]string, len(cands))
		for i, cd := range cands {
			keys[i] = lockKey("s", cd.Key.App, cd.Key.User, cd.Key.ID)
		}
		if err := s.exec(ctx, tx.Tx, "lock sessions", q, keys); err != nil {
			return nil, fmt.Errorf("prune sessions: %w", err)
		}
	}
	now, err := s.recheck(ctx, tx, cands)
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
			out.Bytes += row.StateBytes.Int64
			c.add(0, cd.Key.App).add(1, cd.Key.User).add(2, cd.Key.ID)
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
	var sizes struct {
		Events int64 `db:"events"`
		Bytes  int64 `db:"bytes"`
	}
	if err := tx.GetContext(ctx, &sizes, s.pruneQueries().eventSizes, args...); err != nil {
		return nil, fmt.Errorf("prune sessions: count events: %w", err)
	}
	out.Events, out.Bytes = sizes.Events, out.Bytes+sizes.Bytes
	if dryRun {
		return out, nil
	}
	// The trigger deletes the sessions' events.
	if err := s.exec(ctx, tx.Tx, "delete sessions", s.d.q.purgeSessions, keys...); err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	if err := s.exec(ctx, tx.Tx, "delete bookkeeping", s.pruneQueries().untrack, keys...); err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("prune sessions: commit: %w", err)
	}
	return out, nil
}

// rechecked is a session row as DeleteIdleSessions reads it again.
type rechecked struct {
	base.SessionRef
	Updated     dbTime        `db:"update_time"`
	Incarnation sql.NullInt64 `db:"incarnation"` // NULL: untracked
	Rev         sql.NullInt64 `db:"rev"`
	Deleted     sql.NullBool  `db:"deleted"`
	StateBytes  sql.NullInt64 `db:"state_bytes"` // the stored size of the state
}

// same reports whether the row is still what the walk read as c.
func (r rechecked) same(c PruneCandidate) bool {
	if !r.Updated.t.Equal(c.UpdateTime) || r.Incarnation.Valid != c.Tracked || (r.Deleted.Valid && r.Deleted.Bool) {
		return false
	}
	return !c.Tracked || (r.Incarnation.Int64 == c.Incarnation && r.Rev.Int64 == c.Rev)
}

// recheck reads the candidates' rows again.
func (s *Store) recheck(ctx context.Context, tx *sqlx.Tx, cands []PruneCandidate) (map[base.SessionRef]rechecked, error) {
	var c columns
	for _, cd := range cands {
		c.add(0, cd.Key.App).add(1, cd.Key.User).add(2, cd.Key.ID)
	}
	args, err := s.d.bind(c.take(3)...)
	if err != nil {
		return nil, fmt.Errorf("prune sessions: %w", err)
	}
	var rows []rechecked
	if err := tx.SelectContext(ctx, &rows, s.pruneQueries().recheck, args...); err != nil {
		return nil, fmt.Errorf("prune sessions: read them again: %w", err)
	}
	now := make(map[base.SessionRef]rechecked, len(rows))
	for _, r := range rows {
		now[r.SessionRef] = r
	}
	return now, nil
}
