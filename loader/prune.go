package loader

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// PruneDatabase is what a prune asks of the database: walk the idle
// sessions and the bookkeeping's tombstones, delete rows.
type PruneDatabase interface {
	IdleSessions(ctx context.Context, cutoff time.Time, app string) (*persist.PruneWalk, error)
	CountIdleSessions(ctx context.Context, cutoff time.Time, app string) (int64, error)
	DeleteIdleSessions(ctx context.Context, cands []persist.PruneCandidate, dryRun bool) (*persist.PrunedSessions, error)
	DeleteSessionlessUsers(ctx context.Context, users []persist.StateRef, cutoff time.Time, dryRun bool) ([]persist.StateRef, error)
	DeleteSessionlessApps(ctx context.Context, apps []persist.StateRef, cutoff time.Time, dryRun bool) ([]persist.StateRef, error)
	Tombstones(app string) *persist.TombstoneWalk
}

var _ PruneDatabase = (*persist.Store)(nil)

// PruneArgs is one run of Prune, its request checked and defaulted
// (service.Prune).
type PruneArgs struct {
	Cutoff          time.Time // sessions updated before it are idle
	App             string    // "": every app
	DryRun          bool      // count, delete nothing
	BatchSize       int       // sessions per database transaction
	TombstoneMargin time.Duration
	// Progress, when set, is called after every batch with the idle
	// sessions examined, of total (counted first), and the tally so far.
	Progress func(examined, total int64, so PruneTally)
	// Deleted, when set, is told each batch's deletions as they happen.
	Deleted func(sessions, events int64)
	// Stage, set by tests, runs at each stage of a batch.
	Stage func(PruneStage)
}

// PruneTally is what a prune did (or, dry, would do) so far; the fields
// are service.PruneSummary's.
type PruneTally struct {
	Sessions, Events, Bytes    int64
	UserStates, AppStates      int64
	Tombstones, TombstonesSeen int64
	Kept                       int64
	Batches                    int
}

// PruneStage is a point of a prune's batch that tests stop at
// (PruneArgs.Stage).
type PruneStage int

const (
	PruneRead   PruneStage = iota // the batch's candidates read, nothing fenced yet
	PruneFenced                   // fenced in Redis, the rows not deleted yet
)

func (st PruneStage) String() string { return [...]string{"read", "fenced"}[st] }

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

// Prune deletes the sessions idle since a.Cutoff from the database and
// from Redis (docs/operations.md, "Retention"): batch by batch, each
// fenced in Redis first (cache.Store.FenceSessions), its rows deleted in
// one short transaction while they are still as read, the fence lifted
// from those that changed meanwhile, and the read guards of those deleted
// moved (a cold read that began before the delete must not put them
// back); then the state of the users and apps left without a session, and
// the bookkeeping's tombstones older than a.TombstoneMargin. It needs a
// database (PruneDatabase); on an error it returns the tally so far.
func (l *Loader) Prune(ctx context.Context, a PruneArgs) (PruneTally, error) {
	if l.opts.Prune == nil {
		return PruneTally{}, errors.New("prune: no database")
	}
	p := &pruner{l: l, db: l.opts.Prune, a: a, token: uuid.NewString(),
		users: map[persist.StateRef]bool{}, apps: map[string]bool{}}
	err := p.run(ctx)
	return p.sum, err
}

// pruner is one run of Prune.
type pruner struct {
	l     *Loader
	db    PruneDatabase
	a     PruneArgs
	token string // names this run's fences
	sum   PruneTally
	// users and apps whose sessions this run deleted: their state goes
	// when no session of theirs is left.
	users map[persist.StateRef]bool
	apps  map[string]bool
}

func (p *pruner) run(ctx context.Context) error {
	walk, err := p.db.IdleSessions(ctx, p.a.Cutoff, p.a.App)
	if err != nil {
		return err
	}
	var examined, total int64
	if p.a.Progress != nil {
		if total, err = p.db.CountIdleSessions(ctx, p.a.Cutoff, p.a.App); err != nil {
			return err
		}
	}
	report := func() {
		if p.a.Progress != nil {
			p.a.Progress(examined, total, p.sum)
		}
	}
	for {
		cands, err := walk.Next(ctx, p.a.BatchSize)
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
		examined += int64(len(cands))
		report()
	}
	if err := p.dropUsers(ctx); err != nil {
		return err
	}
	if err := p.dropApps(ctx); err != nil {
		return err
	}
	err = p.purgeTombstones(ctx)
	report()
	return err
}

// batch prunes one batch of idle sessions: fence them in Redis, delete the
// rows of those fenced that are still as read, lift the fence from the
// others.
func (p *pruner) batch(ctx context.Context, cands []persist.PruneCandidate) error {
	p.stage(PruneRead)
	refs := make([]cache.FenceRef, len(cands))
	for i, c := range cands {
		refs[i] = cache.FenceRef{SessionRef: c.Key, Incarnation: c.Incarnation, Rev: c.Rev}
	}
	fences, err := p.l.cache.FenceSessions(ctx, p.token, p.a.Cutoff.UnixMicro(), pruneFenceTTL, refs, p.a.DryRun)
	if err != nil {
		if !p.a.DryRun { // some may be fenced: lift this run's fences
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
	p.stage(PruneFenced)
	tctx, cancel := context.WithTimeout(ctx, pruneTxTimeout)
	done, err := p.db.DeleteIdleSessions(tctx, fenced, p.a.DryRun)
	cancel()
	if err != nil {
		if !p.a.DryRun {
			err = errors.Join(err, p.unfence(ctx, fencedRefs))
		}
		return err
	}
	if !p.a.DryRun {
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
		if err := p.l.cache.MoveGuards(ctx, deleted); err != nil {
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
	if p.a.Deleted != nil {
		p.a.Deleted(int64(len(done.Deleted)), done.Events)
	}
	for _, k := range done.Deleted {
		p.users[persist.StateRef{AppName: k.App, UserID: k.User}] = true
		p.apps[k.App] = true
	}
	return nil
}

func (p *pruner) stage(st PruneStage) {
	if p.a.Stage != nil {
		p.a.Stage(st)
	}
}

// unfence lifts this run's fences, also when ctx has ended.
func (p *pruner) unfence(ctx context.Context, refs []cache.FenceRef) error {
	if len(refs) == 0 {
		return nil
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return p.l.cache.UnfenceSessions(uctx, p.token, refs)
}

// dropUsers deletes the state of the users this run took the last
// session of: the database's rows first, then what Redis caches of them.
func (p *pruner) dropUsers(ctx context.Context) error {
	refs := make([]persist.StateRef, 0, len(p.users))
	for r := range p.users {
		refs = append(refs, r)
	}
	clear(p.users)
	gone, err := p.db.DeleteSessionlessUsers(ctx, refs, p.a.Cutoff, p.a.DryRun)
	if err != nil {
		return err
	}
	p.sum.UserStates += int64(len(gone))
	if p.a.DryRun || len(gone) == 0 {
		return nil
	}
	pairs := make([]base.StateOwner, len(gone))
	for i, g := range gone {
		pairs[i] = base.StateOwner{App: g.AppName, User: g.UserID}
	}
	_, err = p.l.cache.DropUsers(ctx, pairs)
	return err
}

// dropApps deletes the state of the apps this run took the last session
// of, unless Redis holds a session of theirs not flushed yet.
func (p *pruner) dropApps(ctx context.Context) error {
	var refs []persist.StateRef
	for app := range p.apps {
		if !p.a.DryRun {
			indexed, err := p.l.cache.AppIndexed(ctx, app)
			if err != nil {
				return err
			}
			if indexed {
				continue
			}
		}
		refs = append(refs, persist.StateRef{AppName: app})
	}
	gone, err := p.db.DeleteSessionlessApps(ctx, refs, p.a.Cutoff, p.a.DryRun)
	if err != nil {
		return err
	}
	p.sum.AppStates += int64(len(gone))
	for _, g := range gone {
		if p.a.DryRun {
			break
		}
		if _, err := p.l.cache.DropApp(ctx, g.AppName, g.Rev); err != nil {
			return err
		}
	}
	return nil
}

// purgeTombstones walks the bookkeeping's tombstones: stamps the new ones,
// purges those stamped more than TombstoneMargin ago.
func (p *pruner) purgeTombstones(ctx context.Context) error {
	walk := p.db.Tombstones(p.a.App)
	now := time.Now()
	for {
		b, err := walk.Next(ctx, p.a.BatchSize, now, p.a.TombstoneMargin, p.a.DryRun)
		p.sum.Tombstones += b.Purged
		p.sum.TombstonesSeen += b.Stamped
		if err != nil || b.Read == 0 {
			return err
		}
	}
}
