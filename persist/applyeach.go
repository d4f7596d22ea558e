package persist

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// Unit is a part of a batch that ApplyEach writes on its own.
type Unit int

// The units of a batch.
const (
	// UnitSession is a session's sessions row with its bookkeeping (and the
	// delete of an earlier incarnation, or a delete).
	UnitSession Unit = iota
	// UnitEvent is one events row.
	UnitEvent
	// UnitUserState is a user_states row (its {} seed or a snapshot).
	UnitUserState
	// UnitAppState is an app_states row (its {} seed or a snapshot).
	UnitAppState
)

func (u Unit) String() string {
	switch u {
	case UnitSession:
		return "session"
	case UnitEvent:
		return "event"
	case UnitUserState:
		return "user state"
	case UnitAppState:
		return "app state"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

// Rejected is a part of a batch the database refused for good.
type Rejected struct {
	Unit Unit
	// Key is the session of a UnitSession or UnitEvent; its AppName (and
	// UserID) name the state of a UnitAppState (UnitUserState).
	Key base.SessionRef
	// EventID and Seq name the event of a UnitEvent.
	EventID string
	Seq     int64
	// EventsWritten: a UnitSession's events were written all the same (its
	// row of that incarnation is in the database already).
	EventsWritten bool
	Err           error
}

// ApplyEach writes what Apply would, in one transaction, but each unit on
// its own (savepoints): a session's row with its bookkeeping, each of its
// events, each app or user state row. A unit the database refuses for good
// (ErrInvalidBatch, or a data error: see docs/persistence.md) is left out
// and returned; the others are written. The events of a session whose row
// is refused are written only when its row of that incarnation is in the
// database already (so a delete removes them with it); otherwise they are
// left out with it (and not returned). Any other error (the database is
// down) writes nothing and is returned, as Apply's.
//
// It costs a few statements per row: the flusher calls it only for a batch
// that Apply refused.
func (s *Store) ApplyEach(ctx context.Context, b *Batch) ([]Rejected, error) {
	tx, err := s.beginTx(ctx, s.db, nil)
	if err != nil {
		return nil, fmt.Errorf("apply batch: %w", err)
	}
	defer tx.Rollback()
	p, err := s.planTx(ctx, tx, b)
	if err != nil {
		return nil, fmt.Errorf("apply batch: %w", err)
	}
	rejected, err := s.writeEach(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("apply batch: %w", err)
	}
	b.Outcome.Conflicts = append(b.Outcome.Conflicts, p.conflicts...)
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("apply batch: commit: %w", err)
	}
	return rejected, nil
}

// writeEach writes each unit of p in a savepoint.
func (s *Store) writeEach(ctx context.Context, tx *sql.Tx, p *plan) ([]Rejected, error) {
	var out []Rejected
	try := func(r Rejected, write func() error) (bool, error) {
		err := inSavepoint(ctx, tx, write)
		switch {
		case err == nil:
			return true, nil
		case IsPermanent(err):
			r.Err = err
			out = append(out, r)
			return false, nil
		}
		return false, err
	}

	purge := map[base.SessionRef]bool{}
	for _, k := range p.purge {
		purge[k] = true
	}
	sessions := map[base.SessionRef]*SessionUpsert{}
	for _, u := range p.sessions {
		sessions[u.Key] = u
	}
	events := map[base.SessionRef][]EventRow{}
	for _, e := range p.events {
		events[e.Key] = append(events[e.Key], e)
	}
	// Every key a session unit writes has a bookkeeping row (p.tracked).
	for _, t := range p.tracked {
		k := t.key
		var purgeK []base.SessionRef
		var sessK []*SessionUpsert
		if purge[k] {
			purgeK = []base.SessionRef{k}
		}
		if u := sessions[k]; u != nil {
			sessK = []*SessionUpsert{u}
		}
		ok, err := try(Rejected{Unit: UnitSession, Key: k, EventsWritten: p.known[k]}, func() error {
			return s.writeSessions(ctx, tx, purgeK, sessK, []trackedRow{t})
		})
		if err != nil {
			return nil, err
		}
		if !ok && !p.known[k] {
			continue
		}
		for _, e := range events[k] {
			if _, err := try(Rejected{Unit: UnitEvent, Key: k, EventID: e.ID, Seq: e.Seq}, func() error {
				return s.writeEvents(ctx, tx, p, []EventRow{e})
			}); err != nil {
				return nil, err
			}
		}
	}
	for _, a := range p.ensureApps {
		if _, err := try(Rejected{Unit: UnitAppState, Key: base.SessionRef{App: a.key.app}}, func() error {
			return s.writeSeeds(ctx, tx, []stateSeed{a}, nil)
		}); err != nil {
			return nil, err
		}
	}
	for _, u := range p.ensureUsers {
		if _, err := try(Rejected{Unit: UnitUserState, Key: base.SessionRef{App: u.key.app, User: u.key.user}}, func() error {
			return s.writeSeeds(ctx, tx, nil, []stateSeed{u})
		}); err != nil {
			return nil, err
		}
	}
	revs := map[stateKey]stateRev{}
	for _, r := range p.stateRevs {
		revs[r.key] = r
	}
	for _, group := range []struct {
		users  bool
		unit   Unit
		states []*StateUpsert
	}{{false, UnitAppState, p.appStates}, {true, UnitUserState, p.userStates}} {
		for _, st := range group.states {
			k := stateKey{app: st.AppName, user: st.UserID}
			rev := revs[k]
			delete(revs, k)
			if _, err := try(Rejected{Unit: group.unit, Key: base.SessionRef{App: st.AppName, User: st.UserID}}, func() error {
				if err := s.writeStates(ctx, tx, group.users, []*StateUpsert{st}); err != nil {
					return err
				}
				return s.writeStateRevs(ctx, tx, []stateRev{rev})
			}); err != nil {
				return nil, err
			}
		}
	}
	// The flush counts of the snapshots not written (planStates).
	var counts []stateRev
	for _, r := range p.stateRevs {
		if _, ok := revs[r.key]; ok {
			counts = append(counts, r)
		}
	}
	if err := s.writeStateRevs(ctx, tx, counts); err != nil {
		return nil, err
	}
	return out, nil
}

// inSavepoint runs write in a savepoint of tx: when it fails, what it wrote
// is undone and its error returned, and tx goes on.
func inSavepoint(ctx context.Context, tx *sql.Tx, write func() error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT adksession_unit"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := write(); err != nil {
		if _, rb := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT adksession_unit"); rb != nil {
			return fmt.Errorf("rollback to savepoint after %v: %w", err, rb)
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT adksession_unit"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}
