package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache/base/startstop"
)

// RetentionConfig makes a Service prune idle sessions in the background
// (Config.Retention): the fleet prunes once per Interval, one process at a
// time, under a lease in Redis. See Prune.
type RetentionConfig struct {
	// IdleFor: sessions whose last update is older are pruned. 0 (the
	// default) runs no background prune. It needs a database.
	IdleFor time.Duration
	// Interval is how often the fleet prunes (default 1h). Each process
	// tries every Interval (with up to 10% jitter); the first that finds
	// the prune lease free takes it for Interval (renewed while it
	// prunes), so the others skip until it expires.
	Interval time.Duration
	// AppName limits the prune to one app ("" = every app).
	AppName string
	// BatchSize and TombstoneMargin are PruneRequest's (defaults 500 and 1h).
	BatchSize       int
	TombstoneMargin time.Duration

	// attempts, set by tests of this package (Init), hears of every
	// attempt: whether this process held the lease and pruned.
	attempts *startstop.Signal[retentionAttempt]
}

// retentionAttempt is one try of the background prune.
type retentionAttempt struct {
	pruned bool
	sum    *PruneSummary
	err    error
}

func (r RetentionConfig) withDefaults(durable bool) (RetentionConfig, error) {
	switch {
	case r.IdleFor < 0:
		return r, fmt.Errorf("%w: Config.Retention.IdleFor: %s, must be >= 0 (0: no background prune)", ErrInvalidArgument, r.IdleFor)
	case r.IdleFor > 0 && !durable:
		return r, fmt.Errorf("%w: Config.Retention: a background prune needs a database (Config.DatabaseURL or Config.DB)", ErrInvalidArgument)
	case r.Interval < 0:
		return r, fmt.Errorf("%w: Config.Retention.Interval: %s, must be >= 0 (0: 1h)", ErrInvalidArgument, r.Interval)
	}
	if r.Interval == 0 {
		r.Interval = time.Hour
	}
	if r.IdleFor == 0 {
		return r, nil
	}
	req := r.request()
	if err := req.check(); err != nil {
		return r, fmt.Errorf("Config.Retention: %w", err)
	}
	return r, nil
}

func (r RetentionConfig) request() PruneRequest {
	return PruneRequest{IdleFor: r.IdleFor, AppName: r.AppName, BatchSize: r.BatchSize, TombstoneMargin: r.TombstoneMargin}
}

// retention is the background prune of one Service.
type retention struct {
	s     *Service
	cfg   RetentionConfig
	owner string
	log   *slog.Logger
	life  startstop.Base
}

// startRetention starts the background prune when cfg asks for one.
func (s *Service) startRetention(ctx context.Context, cfg RetentionConfig, log *slog.Logger) {
	if cfg.IdleFor <= 0 {
		return
	}
	r := &retention{s: s, cfg: cfg, owner: uuid.NewString(), log: log}
	s.retention = r
	r.life.Start(ctx, r.loop)
}

func (r *retention) loop(ctx context.Context) {
	failures := startstop.NewEvery(time.Minute)
	for {
		pruned, sum, err := r.attempt(ctx)
		if a := r.cfg.attempts; a != nil {
			a.Send(retentionAttempt{pruned, sum, err})
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if failures.Allow(time.Now()) {
				r.log.Warn("adksession retention: prune failed, trying again next interval", "err", err)
			}
		case pruned && sum.Sessions > 0:
			r.log.Info("adksession retention: pruned idle sessions", "sessions", sum.Sessions, "events", sum.Events,
				"bytes", sum.Bytes, "kept", sum.Kept, "took", sum.Duration)
		}
		if !startstop.Wait(ctx, startstop.Jitter(r.cfg.Interval, 10)) {
			return
		}
	}
}

// attempt prunes if this process gets the fleet's prune lease. The lease
// stays until Interval has passed since the prune's last batch (so the
// fleet prunes once per Interval); a prune cut short by Close gives it up.
func (r *retention) attempt(ctx context.Context) (bool, *PruneSummary, error) {
	ok, err := r.s.cache.AcquirePruneLease(ctx, r.owner, r.cfg.Interval)
	if err != nil || !ok {
		return false, nil, err
	}
	req := r.cfg.request()
	var renewErr error
	req.Progress = func(PruneProgress) {
		if _, err := r.s.cache.AcquirePruneLease(ctx, r.owner, r.cfg.Interval); err != nil && renewErr == nil {
			renewErr = err // a prune is safe alongside another: go on
		}
	}
	sum, err := r.s.Prune(ctx, &req)
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = errors.Join(err, r.s.cache.ReleasePruneLease(rctx, r.owner))
		cancel()
	}
	return true, sum, errors.Join(err, renewErr)
}

// stop ends the background prune (a prune under way stops after its
// current batch, its fences lifted) and waits for it. Calling it again is a
// no-op.
func (r *retention) stop() { r.life.Stop() }
