package service

import (
	"context"
	"fmt"
	"time"

	"github.com/adksession/adksession/loader"
)

// PruneRequest asks Prune to delete the sessions nobody has touched for a
// while.
type PruneRequest struct {
	// IdleFor: sessions whose last update is older than this are deleted
	// (required, > 0).
	IdleFor time.Duration
	// AppName limits the prune to one app ("" = every app).
	AppName string
	// DryRun counts what a prune would delete and deletes nothing.
	DryRun bool
	// BatchSize is the number of sessions per database transaction
	// (default 500, at most MaxPruneBatch).
	BatchSize int
	// TombstoneMargin is how long a tombstone of the bookkeeping table (a
	// deleted session's row) must have been known to a prune before a prune
	// purges it (default 1h).
	TombstoneMargin time.Duration
	// Progress, when set, is called after every batch, from the goroutine
	// of Prune; Total is then counted first (one scan of the sessions).
	Progress func(PruneProgress)
}

// MaxPruneBatch is the largest PruneRequest.BatchSize. On Postgres a
// batch's transaction takes one advisory lock per session, as a flusher's
// batch does, from the shared lock table (max_locks_per_transaction ×
// max_connections: 6 400 by default).
const MaxPruneBatch = 5000

// PruneProgress is how far a prune got.
type PruneProgress struct {
	Examined, Total int64 // idle sessions read from the database, of those idle when it started
	PruneSummary          // so far
}

// PruneSummary is what a prune did (or, with DryRun, would do).
type PruneSummary struct {
	DryRun bool
	Cutoff time.Time // sessions updated before it were idle
	// Sessions deleted, with their Events; Bytes is the stored size of
	// the JSON deleted from the database (event_data and session state).
	Sessions, Events, Bytes int64
	// UserStates and AppStates are the state rows deleted because no
	// session of their user or app was left.
	UserStates, AppStates int64
	// Tombstones are rows of the bookkeeping table (deleted sessions)
	// purged; TombstonesSeen those seen for the first time, purged by a
	// later prune once TombstoneMargin has passed.
	Tombstones, TombstonesSeen int64
	// Kept are idle sessions in the database that were kept: updated in
	// Redis and not flushed yet, or changed while the prune ran.
	Kept int64
	// Batches is the number of database transactions that deleted sessions.
	Batches  int
	Duration time.Duration
}

// Prune deletes every session whose last update is older than
// req.IdleFor, from the database (sessions rows, events, bookkeeping) and
// from Redis; the state rows of users and apps left without a session go
// too; the bookkeeping's tombstones older than req.TombstoneMargin are
// purged. It works in batches of req.BatchSize sessions, one short
// transaction each, while appends go on: a session updated after the prune
// read it is kept (docs/operations.md, "Retention", tells how). Several
// prunes may run at once; each session is deleted once.
//
// It needs a database. On an error it returns what it did so far with
// the error; running it again continues.
func (s *Service) Prune(ctx context.Context, r *PruneRequest) (*PruneSummary, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: Prune: nil request", ErrInvalidArgument)
	}
	req := *r // defaulted here, not in the caller's request
	if err := req.check(); err != nil {
		return nil, err
	}
	if !s.loader.Durable() {
		return nil, fmt.Errorf("%w: Prune: this service has no database (Config.DatabaseURL); without one Redis is the only copy and sessions are deleted with Delete", ErrInvalidArgument)
	}
	start := time.Now()
	sum := PruneSummary{DryRun: req.DryRun, Cutoff: start.Add(-req.IdleFor).Truncate(time.Microsecond)}
	a := loader.PruneArgs{Cutoff: sum.Cutoff, App: req.AppName, DryRun: req.DryRun, BatchSize: req.BatchSize,
		TombstoneMargin: req.TombstoneMargin, Stage: s.pruneHook}
	if !req.DryRun {
		a.Deleted = s.prunes.add
	}
	if req.Progress != nil {
		a.Progress = func(examined, total int64, so loader.PruneTally) {
			req.Progress(PruneProgress{Examined: examined, Total: total, PruneSummary: sum.with(so)})
		}
	}
	tally, err := s.loader.Prune(ctx, a)
	sum = sum.with(tally)
	sum.Duration = time.Since(start)
	s.prunes.record(&sum, err)
	return &sum, err
}

// with is the summary with the counts of tally.
func (sum PruneSummary) with(t loader.PruneTally) PruneSummary {
	sum.Sessions, sum.Events, sum.Bytes = t.Sessions, t.Events, t.Bytes
	sum.UserStates, sum.AppStates = t.UserStates, t.AppStates
	sum.Tombstones, sum.TombstonesSeen, sum.Kept, sum.Batches = t.Tombstones, t.TombstonesSeen, t.Kept, t.Batches
	return sum
}

func (r *PruneRequest) check() error {
	switch {
	case r.IdleFor <= 0:
		return fmt.Errorf("%w: PruneRequest.IdleFor: %s, must be > 0", ErrInvalidArgument, r.IdleFor)
	case r.BatchSize < 0 || r.BatchSize > MaxPruneBatch:
		return fmt.Errorf("%w: PruneRequest.BatchSize: %d, must be in [0, %d] (0: 500)", ErrInvalidArgument, r.BatchSize, MaxPruneBatch)
	case r.TombstoneMargin < 0:
		return fmt.Errorf("%w: PruneRequest.TombstoneMargin: %s, must be >= 0", ErrInvalidArgument, r.TombstoneMargin)
	}
	if r.AppName != "" {
		if err := checkID("PruneRequest.AppName", r.AppName, MaxIDBytes); err != nil {
			return err
		}
	}
	if r.BatchSize == 0 {
		r.BatchSize = 500
	}
	if r.TombstoneMargin == 0 {
		r.TombstoneMargin = time.Hour
	}
	return nil
}
