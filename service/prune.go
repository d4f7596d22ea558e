package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
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

const (
	// pruneFenceTTL bounds how long a session a prune fenced stays hidden
	// when the prune dies before deleting its rows (it is back after that).
	pruneFenceTTL = 2 * time.Minute
	// pruneTxTimeout bounds one batch's transaction, well below
	// pruneFenceTTL: the fence must outlive the delete.
	pruneTxTimeout = 30 * time.Second
	// pruneStateChunk is how many users' state one transaction checks (and
	// locks, on Postgres).
	pruneStateChunk = 500
)

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
	if s.db == nil {
		return nil, fmt.Errorf("%w: Prune: this service has no database (Config.DatabaseURL); without one Redis is the only copy and sessions are deleted with Delete", ErrInvalidArgument)
	}
	start := time.Now()
	p := &pruner{s: s, req: req, token: uuid.NewString(),
		sum:   PruneSummary{DryRun: req.DryRun, Cutoff: start.Add(-req.IdleFor).Truncate(time.Microsecond)},
		users: map[persist.StateRef]bool{}, apps: map[string]bool{}}
	err := p.run(ctx)
	p.sum.Duration = time.Since(start)
	s.prunes.record(&p.sum, err)
	return &p.sum, err
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

// pruner is one run of Prune.
type pruner struct {
	s     *Service
	req   PruneRequest
	token string // names this run's fences
	sum   PruneSummary
	// users and apps whose sessions this run deleted: their state goes
	// when no session of theirs is left.
	users map[persist.StateRef]bool
	apps  map[string]bool
}

func (p *pruner) run(ctx context.Context) error {
	db := p.s.db
	walk, err := db.IdleSessions(ctx, p.sum.Cutoff, p.req.AppName)
	if err != nil {
		return err
	}
	var prog PruneProgress
	if p.req.Progress != nil {
		if prog.Total, err = db.CountIdleSessions(ctx, p.sum.Cutoff, p.req.AppName); err != nil {
			return err
		}
	}
	for {
		cands, err := walk.Next(ctx, p.req.BatchSize)
		if err != nil || len(cands) == 0 {
			if err == nil {
				break
			}
			return err
		}
		if err := p.batch(ctx, cands); err != nil {
			return err
		}
		if len(p.users) >= pruneStateChunk {
			if err := p.dropUsers(ctx); err != nil {
				return err
			}
		}
		prog.Examined += int64(len(cands))
		p.report(&prog)
	}
	if err := p.dropUsers(ctx); err != nil {
		return err
	}
	if err := p.dropApps(ctx); err != nil {
		return err
	}
	err = p.purgeTombstones(ctx)
	p.report(&prog)
	return err
}

func (p *pruner) report(prog *PruneProgress) {
	if p.req.Progress != nil {
		prog.PruneSummary = p.sum
		p.req.Progress(*prog)
	}
}

// batch prunes one batch of idle sessions: fence them in Redis, delete the
// rows of those fenced that are still as read, lift the fence from the
// others.
func (p *pruner) batch(ctx context.Context, cands []persist.PruneCandidate) error {
	p.stage(pruneRead)
	refs := make([]cache.FenceRef, len(cands))
	for i, c := range cands {
		refs[i] = cache.FenceRef{SessionRef: c.Key, Incarnation: c.Incarnation, Rev: c.Rev}
	}
	fences, err := p.s.cache.FenceSessions(ctx, p.token, p.sum.Cutoff.UnixMicro(), pruneFenceTTL, refs, p.req.DryRun)
	if err != nil {
		if !p.req.DryRun { // some may be fenced: lift this run's fences
			err = errors.Join(err, p.unfence(ctx, refs))
		}
		return err
	}
	var fenced []persist.PruneCandidate
	var fencedRefs []cache.FenceRef
	for i, f := range fences {
		switch {
		case f.Fenced:
			fenced = append(fenced, cands[i])
			fencedRefs = append(fencedRefs, refs[i])
		case f.Kept != "deleted": // a session being deleted is not kept
			p.sum.Kept++
		}
	}
	p.stage(pruneFenced)
	tctx, cancel := context.WithTimeout(ctx, pruneTxTimeout)
	done, err := p.s.db.DeleteIdleSessions(tctx, fenced, p.req.DryRun)
	cancel()
	if err != nil {
		if !p.req.DryRun {
			err = errors.Join(err, p.unfence(ctx, fencedRefs))
		}
		return err
	}
	if !p.req.DryRun {
		changed := map[base.SessionRef]bool{}
		for _, k := range done.Changed {
			changed[k] = true
		}
		var lift []cache.FenceRef
		for _, r := range fencedRefs {
			if changed[r.SessionRef] {
				lift = append(lift, r)
			}
		}
		if err := p.unfence(ctx, lift); err != nil {
			return err
		}
		// A cold read that read a deleted session before the delete must not
		// put it back once its fence is gone (cache.ReadGuard).
		deleted := make([]cache.FenceRef, len(done.Deleted))
		for i, k := range done.Deleted {
			deleted[i] = cache.FenceRef{SessionRef: k}
		}
		if err := p.s.cache.MoveGuards(ctx, deleted); err != nil {
			return err
		}
	}
	// Sessions the database no longer had were deleted meanwhile: their
	// fence expires on its own.
	p.sum.Kept += int64(len(done.Changed))
	if len(done.Deleted) > 0 {
		p.sum.Batches++
	}
	p.sum.Sessions += int64(len(done.Deleted))
	p.sum.Events += done.Events
	p.sum.Bytes += done.Bytes
	p.s.prunes.add(int64(len(done.Deleted)), done.Events)
	for _, k := range done.Deleted {
		p.users[persist.StateRef{AppName: k.App, UserID: k.User}] = true
		p.apps[k.App] = true
	}
	return nil
}

// pruneStage is a point of a prune's batch that tests stop at
// (Service.pruneHook).
type pruneStage int

const (
	pruneRead   pruneStage = iota // the batch's candidates read, nothing fenced yet
	pruneFenced                   // fenced in Redis, the rows not deleted yet
)

func (st pruneStage) String() string { return [...]string{"read", "fenced"}[st] }

func (p *pruner) stage(st pruneStage) {
	if h := p.s.pruneHook; h != nil {
		h(st)
	}
}

// unfence lifts this run's fences, also when ctx has ended.
func (p *pruner) unfence(ctx context.Context, refs []cache.FenceRef) error {
	if len(refs) == 0 {
		return nil
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return p.s.cache.UnfenceSessions(uctx, p.token, refs)
}

// dropUsers deletes the state of the users this run took the last
// session of: the database's rows first, then what Redis caches of them.
func (p *pruner) dropUsers(ctx context.Context) error {
	refs := make([]persist.StateRef, 0, len(p.users))
	for r := range p.users {
		refs = append(refs, r)
	}
	clear(p.users)
	gone, err := p.s.db.DeleteSessionlessUsers(ctx, refs, p.sum.Cutoff, p.req.DryRun)
	if err != nil {
		return err
	}
	p.sum.UserStates += int64(len(gone))
	if p.req.DryRun || len(gone) == 0 {
		return nil
	}
	pairs := make([]base.StateOwner, len(gone))
	for i, g := range gone {
		pairs[i] = base.StateOwner{App: g.AppName, User: g.UserID}
	}
	_, err = p.s.cache.DropUsers(ctx, pairs)
	return err
}

// dropApps deletes the state of the apps this run took the last session
// of, unless Redis holds a session of theirs not flushed yet.
func (p *pruner) dropApps(ctx context.Context) error {
	var refs []persist.StateRef
	for app := range p.apps {
		if !p.req.DryRun {
			indexed, err := p.s.cache.AppIndexed(ctx, app)
			if err != nil {
				return err
			}
			if indexed {
				continue
			}
		}
		refs = append(refs, persist.StateRef{AppName: app})
	}
	gone, err := p.s.db.DeleteSessionlessApps(ctx, refs, p.sum.Cutoff, p.req.DryRun)
	if err != nil {
		return err
	}
	p.sum.AppStates += int64(len(gone))
	for _, g := range gone {
		if p.req.DryRun {
			break
		}
		if _, err := p.s.cache.DropApp(ctx, g.AppName, g.Rev); err != nil {
			return err
		}
	}
	return nil
}

// purgeTombstones walks the bookkeeping's tombstones: stamps the new ones,
// purges those stamped more than TombstoneMargin ago.
func (p *pruner) purgeTombstones(ctx context.Context) error {
	walk := p.s.db.Tombstones(p.req.AppName)
	now := time.Now()
	for {
		b, err := walk.Next(ctx, p.req.BatchSize, now, p.req.TombstoneMargin, p.req.DryRun)
		p.sum.Tombstones += b.Purged
		p.sum.TombstonesSeen += b.Stamped
		if err != nil || b.Read == 0 {
			return err
		}
	}
}
