package persist

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// Apply writes b in one transaction, idempotently: applying a batch again,
// or applying an older batch after a newer one, changes nothing, and no row
// ever goes back to an older incarnation or revision (see planBatch and
// docs/persistence.md). Each table gets one statement per batch.
//
// Apply is safe for concurrent use, also from several processes: batches
// touching the same session, app or user state serialize. It returns an
// error wrapping ErrInvalidBatch when b holds data no retry can write; any
// other error may be transient and the batch can be retried as it is.
func (s *Store) Apply(ctx context.Context, b *Batch) error {
	if len(b.Deletes)+len(b.Sessions)+len(b.UserStates)+len(b.AppStates)+len(b.Voided) == 0 {
		return nil
	}
	tx, err := s.beginTx(ctx, s.db, nil)
	if err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	defer tx.Rollback()
	p, err := s.planTx(ctx, tx, b)
	if err == nil {
		err = s.write(ctx, tx, p)
	}
	if err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	b.Outcome.Conflicts = append(b.Outcome.Conflicts, p.conflicts...)
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("apply batch: commit: %w", err)
	}
	return nil
}

// planTx locks the batch's keys (on Postgres), reads their bookkeeping rows
// and decides what of b applies.
func (s *Store) planTx(ctx context.Context, tx *sql.Tx, b *Batch) (*plan, error) {
	var apps, users, ids, lockKeys []string
	for _, d := range b.Deletes {
		apps, users, ids = append(apps, d.Key.App), append(users, d.Key.User), append(ids, d.Key.ID)
	}
	for _, u := range b.Sessions {
		apps, users, ids = append(apps, u.Key.App), append(users, u.Key.User), append(ids, u.Key.ID)
	}
	var stateApps, stateUsers []string
	for _, st := range [][]StateUpsert{b.AppStates, b.UserStates} {
		for _, u := range st {
			stateApps, stateUsers = append(stateApps, u.AppName), append(stateUsers, u.UserID)
		}
	}
	if s.d.q.lockKeys != "" {
		for i := range apps {
			lockKeys = append(lockKeys, lockKey("s", apps[i], users[i], ids[i]))
		}
		for i := range stateApps {
			lockKeys = append(lockKeys, lockKey("t", stateApps[i], stateUsers[i]))
		}
		if err := s.exec(ctx, tx, "lock keys", s.d.q.lockKeys, lockKeys); err != nil {
			return nil, err
		}
	}
	if err := s.lockSessionRows(ctx, tx, b); err != nil {
		return nil, err
	}
	// The sessions of user writes no event carries: a rebase tells by
	// their bookkeeping whether the database holds their change already.
	for _, w := range b.UserWrites {
		apps, users, ids = append(apps, w.Key.App), append(users, w.Key.User), append(ids, w.Key.ID)
	}
	sessions, facts, err := s.readTracked(ctx, tx, apps, users, ids)
	if err != nil {
		return nil, err
	}
	states, flushes, err := s.readTrackedStates(ctx, tx, stateApps, stateUsers)
	if err != nil {
		return nil, err
	}
	out, err := s.rebaseTx(ctx, tx, b, sessions, facts, states, flushes)
	if err != nil {
		return nil, err
	}
	if out, err = s.mergeApps(ctx, tx, b, out); err != nil {
		return nil, err
	}
	p := planBatch(out, sessions, states)
	for _, u := range p.sessions {
		if b.Outcome.Updated == nil {
			b.Outcome.Updated = map[base.SessionRef]time.Time{}
		}
		b.Outcome.Updated[u.Key] = u.UpdateTime
	}
	return p, nil
}

// lockSessionRows locks the sessions rows of b's upserts (on Postgres),
// after the key locks and before their bookkeeping is read: ADK's append
// takes none of adksession's locks, and one committed between the read of
// a row's update_time and the batch's upsert of the row would be written
// over as if adksession had written it last (simulation seed
// 611470501151). A delete decides on the bookkeeping alone and overwrites
// whatever ADK wrote, so its row is not locked here.
func (s *Store) lockSessionRows(ctx context.Context, tx *sql.Tx, b *Batch) error {
	if s.d.q.lockSessions == "" || len(b.Sessions) == 0 {
		return nil
	}
	var apps, users, ids []string
	for _, u := range b.Sessions {
		apps, users, ids = append(apps, u.Key.App), append(users, u.Key.User), append(ids, u.Key.ID)
	}
	return s.exec(ctx, tx, "lock sessions rows", s.d.q.lockSessions, apps, users, ids)
}

// lockKey names a lock unambiguously: a kind letter, then each part
// prefixed with its length.
func lockKey(kind string, parts ...string) string {
	k := kind
	for _, p := range parts {
		k += strconv.Itoa(len(p)) + ":" + p
	}
	return k
}

// readTracked reads the bookkeeping rows of the sessions named, and for
// each whether its sessions row was written by someone else since
// adksession last wrote it (facts).
func (s *Store) readTracked(ctx context.Context, tx *sql.Tx, apps, users, ids []string) (map[base.SessionRef]tracked, map[base.SessionRef]rowFacts, error) {
	m := map[base.SessionRef]tracked{}
	facts := map[base.SessionRef]rowFacts{}
	if len(apps) == 0 {
		return m, facts, nil
	}
	args, err := s.d.bind(apps, users, ids)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, s.d.q.readSessions, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read session bookkeeping: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k base.SessionRef
		var t tracked
		var written sql.NullInt64
		var updated nullTime
		if err := rows.Scan(&k.App, &k.User, &k.ID, &t.incarnation, &t.rev, &t.deleted, &written, &updated); err != nil {
			return nil, nil, fmt.Errorf("read session bookkeeping: %w", err)
		}
		if t.deleted && written.Valid {
			t.deletedAt = written.Int64
		}
		m[k] = t
		facts[k] = rowFacts{foreign: written.Valid && updated.valid && updated.t.UnixMicro() != written.Int64}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read session bookkeeping: %w", err)
	}
	return m, facts, nil
}

// readTrackedStates reads the bookkeeping rows of the states named: their
// revs and the flush counts of the hashes they were read from.
func (s *Store) readTrackedStates(ctx context.Context, tx *sql.Tx, apps, users []string) (revs, flushes map[stateKey]int64, err error) {
	revs, flushes = map[stateKey]int64{}, map[stateKey]int64{}
	if len(apps) == 0 {
		return revs, flushes, nil
	}
	args, err := s.d.bind(apps, users)
	if err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, s.d.q.readStates, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read state bookkeeping: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k stateKey
		var rev, n int64
		if err := rows.Scan(&k.app, &k.user, &rev, &n); err != nil {
			return nil, nil, fmt.Errorf("read state bookkeeping: %w", err)
		}
		revs[k], flushes[k] = rev, n
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read state bookkeeping: %w", err)
	}
	return revs, flushes, nil
}
