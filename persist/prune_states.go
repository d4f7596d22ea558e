package persist

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// StateRef names an app's state (UserID "") or a user's, with the
// revision of its row (0 for a row ADK wrote).
type StateRef struct {
	AppName string `db:"app_name"`
	UserID  string `db:"user_id"`
	Rev     int64  `db:"rev"`
}

// DeleteSessionlessUsers deletes the user_states rows (and their
// bookkeeping) of the users named that have no session left, in one
// transaction that holds, on Postgres, the advisory locks Apply takes for
// those states (so that a batch creating a session of such a user waits,
// and writes the state again). It returns the users whose state it
// deleted, with the revision their row had. With dryRun it deletes
// nothing, and counts as left only the sessions updated since cutoff (those
// a prune keeps).
func (s *Store) DeleteSessionlessUsers(ctx context.Context, users []StateRef, cutoff time.Time, dryRun bool) ([]StateRef, error) {
	return s.deleteSessionless(ctx, users, false, cutoff, dryRun)
}

// DeleteSessionlessApps is DeleteSessionlessUsers for the app_states rows
// of apps (UserID "").
func (s *Store) DeleteSessionlessApps(ctx context.Context, apps []StateRef, cutoff time.Time, dryRun bool) ([]StateRef, error) {
	return s.deleteSessionless(ctx, apps, true, cutoff, dryRun)
}

func (s *Store) deleteSessionless(ctx context.Context, refs []StateRef, apps bool, cutoff time.Time, dryRun bool) ([]StateRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	q := s.pruneQueries()
	what, find, drop, width := "users", q.sessionlessUsers, q.dropUserStates, 2
	if apps {
		what, find, drop, width = "apps", q.sessionlessApps, q.dropAppStates, 1
	}
	since := time.Time{} // a prune keeps a state while any session is left
	pool, opts := s.db, (*sql.TxOptions)(nil)
	if dryRun {
		since, pool, opts = cutoff, s.rd, readTx
	}
	tx, err := s.beginTxx(ctx, pool, opts)
	if err != nil {
		return nil, fmt.Errorf("prune states of %s: %w", what, err)
	}
	defer tx.Rollback()
	var named columns
	locks := make([]string, len(refs))
	for i, r := range refs {
		named.add(0, r.AppName).add(1, r.UserID)
		locks[i] = lockKey("t", r.AppName, r.UserID)
	}
	if lq := s.d.q.lockKeys; lq != "" && !dryRun {
		if err := s.exec(ctx, tx.Tx, "lock states", lq, locks); err != nil {
			return nil, fmt.Errorf("prune states of %s: %w", what, err)
		}
	}
	args, err := s.d.bind(named.take(width)...)
	if err != nil {
		return nil, fmt.Errorf("prune states of %s: %w", what, err)
	}
	var out []StateRef
	if err := tx.SelectContext(ctx, &out, find, append(args, formatTime(since))...); err != nil {
		return nil, fmt.Errorf("prune states of %s: find those without sessions: %w", what, err)
	}
	if dryRun || len(out) == 0 {
		return out, nil
	}
	var c columns
	for _, r := range out {
		c.add(0, r.AppName).add(1, r.UserID)
	}
	keys := c.take(2)
	if err := s.exec(ctx, tx.Tx, "delete states", drop, keys[:width]...); err != nil {
		return nil, fmt.Errorf("prune states of %s: %w", what, err)
	}
	if err := s.exec(ctx, tx.Tx, "delete state bookkeeping", q.dropStateRevs, keys...); err != nil {
		return nil, fmt.Errorf("prune states of %s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("prune states of %s: commit: %w", what, err)
	}
	return out, nil
}

// TombstoneWalk walks the tombstones of adksession_sessions (deleted rows)
// in primary-key order, to purge them.
type TombstoneWalk struct {
	s     *Store
	app   string
	after *base.SessionRef
}

// Tombstones starts a walk over the tombstones of app (every app when "").
func (s *Store) Tombstones(app string) *TombstoneWalk { return &TombstoneWalk{s: s, app: app} }

// TombstoneBatch is what one step of a TombstoneWalk did.
type TombstoneBatch struct {
	Read    int   // tombstones read (0 at the end of the walk)
	Stamped int64 // seen for the first time: stamped now
	Purged  int64 // stamped before the margin's cutoff: deleted
}

// Next reads up to limit tombstones and, unless dryRun, stamps the ones
// seen for the first time with now and deletes those stamped before
// now − margin (each in its own statement, which checks again that the row
// is still that tombstone). With dryRun it counts what it would purge.
func (w *TombstoneWalk) Next(ctx context.Context, limit int, now time.Time, margin time.Duration, dryRun bool) (TombstoneBatch, error) {
	s := w.s
	q := `SELECT app_name, user_id, session_id, incarnation, tombstone_inc, tombstone_seen
FROM adksession_sessions WHERE deleted AND (? = '' OR app_name = ?)`
	args := []any{w.app, w.app}
	if w.after != nil {
		q += ` AND (app_name, user_id, session_id) > (?, ?, ?)`
		args = append(args, w.after.App, w.after.User, w.after.ID)
	}
	var rows []tombstone
	err := s.rd.SelectContext(ctx, &rows, s.d.rebind(q+` ORDER BY app_name, user_id, session_id LIMIT ?`), append(args, limit)...)
	if err != nil {
		return TombstoneBatch{}, fmt.Errorf("read tombstones: %w", err)
	}
	var b TombstoneBatch
	var stamp, purge columns
	cutoff := now.Add(-margin)
	for _, t := range rows {
		k := t.SessionRef
		b.Read++
		w.after = &k
		switch {
		case !t.SeenIncarnation.Valid || t.SeenIncarnation.Int64 != t.Incarnation:
			stamp.add(0, k.App).add(1, k.User).add(2, k.ID)
			b.Stamped++
		case t.Seen.Valid && t.Seen.V.t.Before(cutoff):
			purge.add(0, k.App).add(1, k.User).add(2, k.ID)
			b.Purged++
		}
	}
	if dryRun {
		return b, nil
	}
	if b.Stamped, err = s.execCount(ctx, "stamp tombstones", s.pruneQueries().stampTombstones, stamp.take(3), formatTime(now)); err != nil {
		return b, err
	}
	if b.Purged, err = s.execCount(ctx, "purge tombstones", s.pruneQueries().purgeTombstones, purge.take(3), formatTime(cutoff)); err != nil {
		return b, err
	}
	return b, nil
}

// tombstone is a deleted bookkeeping row, as TombstoneWalk reads it.
type tombstone struct {
	base.SessionRef
	Incarnation int64 `db:"incarnation"`
	// SeenIncarnation and Seen are its stamp: the incarnation and the time
	// a walk first saw it deleted (NULL: never).
	SeenIncarnation sql.NullInt64    `db:"tombstone_inc"`
	Seen            sql.Null[dbTime] `db:"tombstone_seen"`
}

// execCount runs q on the bound columns and then the extra arguments, on
// its own, and returns the rows it changed (0 without rows to bind).
func (s *Store) execCount(ctx context.Context, what, q string, cols []any, extra ...any) (int64, error) {
	if columnLen(cols[0]) == 0 {
		return 0, nil
	}
	args, err := s.d.bind(cols...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	res, err := s.db.ExecContext(ctx, q, append(args, extra...)...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return res.RowsAffected()
}
