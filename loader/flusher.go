package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base/startstop"
	"github.com/adksession/adksession/persist"
)

// FlusherOptions configure a Flusher. BatchSize, Interval, CacheTTL,
// MaxCachedEvents and LeaseTTL are service.Config's, which holds their
// defaults; the other zero values take the defaults given here.
type FlusherOptions struct {
	BatchSize int // change-log entries per transaction (Config.FlushBatchSize; required)
	// Interval is the longest an idle flusher waits before it looks at
	// every shard again. Idle, it waits for a wakeup: the scripts publish
	// on the wake channel when a shard's change log gets its first entry.
	// The poll is the safety net for a wakeup lost while the subscription
	// reconnected, and for the shards of a flusher that died holding their
	// leases (Config.FlushInterval; required). At work, a flusher passes
	// over the shards back to back.
	Interval        time.Duration
	CacheTTL        time.Duration // TTL of idle, fully flushed sessions (Config.CacheTTL; required)
	MaxCachedEvents int           // flushed events a session keeps in Redis (Config.MaxCachedEvents; required)
	LeaseTTL        time.Duration // how long a shard stays with a flusher that stopped renewing (Config.FlushLeaseTTL; required)
	MaxBackoff      time.Duration // cap of the retry backoff on database errors (default 30s)
	// Parallel is how many shards a pass flushes at once (default 4), each
	// in a transaction of its own.
	Parallel int
	Logger   *slog.Logger
	// AppState applies the app deltas of the entries again (the repair of a
	// writer that died between its two steps), putting the app's state back
	// first when Redis lost it: the loader (required).
	AppState AppStateApplier
}

// AppStateApplier applies an app-state delta to Redis once per change id,
// putting the app's state back from the database when Redis lost it
// (loader.Loader.ApplyApp).
type AppStateApplier interface {
	ApplyApp(ctx context.Context, app string, c cache.AppChange) error
}

func (o FlusherOptions) withDefaults() FlusherOptions {
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// minBackoff is the first wait after a failed pass; it doubles up to
// FlusherOptions.MaxBackoff.
const minBackoff = 100 * time.Millisecond

// FlusherStats are a flusher's counters since it started.
type FlusherStats struct {
	Batches, Entries, Events, Retries, DeadLetters int64
	LastError                                      string
}

// Flusher drains the Redis change log into the database: batches of
// entries, one transaction each, at least once and idempotently (see Apply).
// Several flushers, in one process or many, share the shards: a shard is
// drained by the holder of its lease, so its entries are applied in order;
// a crashed flusher's shards pass to another once its lease expires, and
// its unacknowledged entries are simply read again.
type Flusher struct {
	db    FlushDatabase
	cache flushCache
	opts  FlusherOptions
	owner string

	notify chan struct{}

	life startstop.Base // the loop

	mu     sync.Mutex
	passes chan struct{} // closed and replaced after every pass

	batches, entries, events, retries, dead atomic.Int64
	lastErr                                 atomic.Value
	statsAt                                 atomic.Int64 // unix ms of the last stats write
	statsDirty                              atomic.Bool  // work done since the last stats write
}

// NewFlusher returns a flusher that writes db from the change log of c.
func NewFlusher(db FlushDatabase, c *cache.Store, o FlusherOptions) *Flusher {
	return &Flusher{db: db, cache: c, opts: o.withDefaults(), owner: uuid.NewString(),
		notify: make(chan struct{}, 1), passes: make(chan struct{})}
}

// Start runs the flusher loop in the background until Stop. Calling it
// again is a no-op.
func (f *Flusher) Start(ctx context.Context) {
	f.life.Start(ctx, f.loop)
}

// Stop ends the loop, then drains what is left (drain: until a pass finds
// nothing, retrying failed passes until ctx ends), and gives up the
// flusher's leases at once, so that another flusher takes its shards on its
// next poll (a flusher that dies keeps them for LeaseTTL). Give ctx a
// deadline: with a database that never comes back, the drain retries until
// ctx ends. Calling it again is a no-op.
func (f *Flusher) Stop(ctx context.Context) error {
	if !f.life.Stop() {
		return nil
	}
	err := f.drain(ctx)
	// Give the shards up at once (one pipeline), also when ctx has ended:
	// another flusher takes them on its next poll instead of waiting for
	// the leases to expire.
	rctx, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelRelease()
	return errors.Join(err, f.cache.ReleaseLeases(rctx, f.owner))
}

// drain runs passes until one finds nothing left. A failed pass (the
// database restarting or failing over, a connection refused, Redis
// unreachable for a moment) is retried after the loop's capped backoff for
// as long as ctx lasts: a drain gives up only when its budget ends, never on
// its first error. What is left then stays in the change log for the next
// flusher.
func (f *Flusher) drain(ctx context.Context) error {
	b := newBackoff()
	for {
		n, err := f.RunOnce(ctx)
		if err == nil {
			if n == 0 {
				return nil
			}
			b.reset()
			continue
		}
		if ctx.Err() == nil {
			if startstop.Wait(ctx, f.failedPass(err, &b, "adksession flusher: drain pass failed, retrying")) {
				continue
			}
		}
		return fmt.Errorf("drain: changes left when its budget ended: %w", errors.Join(err, context.Cause(ctx)))
	}
}

// Kick asks for a pass now (Flush calls it).
func (f *Flusher) Kick() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// Passed returns a channel closed at the end of the next pass.
func (f *Flusher) Passed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes
}

// Stats returns the flusher's counters.
func (f *Flusher) Stats() FlusherStats {
	s := FlusherStats{Batches: f.batches.Load(), Entries: f.entries.Load(), Events: f.events.Load(),
		Retries: f.retries.Load(), DeadLetters: f.dead.Load()}
	if e, ok := f.lastErr.Load().(string); ok {
		s.LastError = e
	}
	return s
}

func (f *Flusher) loop(ctx context.Context) {
	// Idle, the loop waits for a wakeup (a script published that a shard's
	// log got its first entry), a Kick, or the safety poll: an idle fleet
	// sends Redis nothing but that poll.
	wake, stopWake := f.cache.Wakeups(ctx)
	defer stopWake()
	idle := f.opts.Interval
	b := newBackoff()
	for {
		n, err := f.RunOnce(ctx)
		f.endPass()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !startstop.Wait(ctx, f.failedPass(err, &b, "adksession flusher: pass failed, retrying")) {
				return
			}
			continue
		case n > 0:
			b.reset()
			continue // more may be waiting
		}
		b.reset()
		timer := time.NewTimer(idle)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-wake:
			timer.Stop()
		case <-f.notify:
			timer.Stop()
		}
	}
}

// backoff is the wait after consecutive failed passes: minBackoff, doubling
// up to FlusherOptions.MaxBackoff, plus up to a fifth of jitter. Its warnings
// are logged at most every 10 s.
type backoff struct {
	d   time.Duration
	log startstop.Every
}

func newBackoff() backoff { return backoff{log: startstop.NewEvery(10 * time.Second)} }

func (b *backoff) reset() { b.d = 0 }

// failedPass counts a failed pass (Stats.Retries, LastError), logs it (rate
// limited) and returns how long to wait before the next one.
func (f *Flusher) failedPass(err error, b *backoff, msg string) time.Duration {
	f.retries.Add(1)
	f.lastErr.Store(err.Error())
	b.d = min(max(2*b.d, minBackoff), f.opts.MaxBackoff)
	if b.log.Allow(time.Now()) {
		f.opts.Logger.Warn(msg, "err", err, "backoff", b.d)
	}
	return startstop.Jitter(b.d, 5)
}

func (f *Flusher) endPass() {
	f.mu.Lock()
	close(f.passes)
	f.passes = make(chan struct{})
	f.mu.Unlock()
}

// RunOnce does one pass: one batch from every shard that has changes and
// whose lease this flusher gets. It returns the entries flushed.
func (f *Flusher) RunOnce(ctx context.Context) (int, error) {
	lens, err := f.cache.ChangeLogLengths(ctx)
	if err != nil {
		return 0, err
	}
	// Shards are independent (a session's changes are all in one), so up
	// to Parallel of them are flushed at once: each batch waits on Redis
	// and the database more than it computes.
	var (
		mu    sync.Mutex
		total int
		errs  []error
		wg    sync.WaitGroup
		slots = make(chan struct{}, f.opts.Parallel)
	)
	for shard, n := range lens {
		if n == 0 {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			done, err := f.leaseAndFlush(ctx, shard)
			mu.Lock()
			defer mu.Unlock()
			total += done
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	f.writeStats(ctx, total > 0, lens)
	return total, errors.Join(errs...)
}

// leaseAndFlush flushes one batch of a shard if this flusher gets its lease.
func (f *Flusher) leaseAndFlush(ctx context.Context, shard int) (int, error) {
	ok, err := f.cache.AcquireLease(ctx, shard, f.owner, f.opts.LeaseTTL)
	if err != nil || !ok {
		return 0, err
	}
	done, err := f.flushShard(ctx, shard)
	if err != nil {
		err = fmt.Errorf("shard %d: %w", shard, err)
	}
	return done, err
}

// flushShard writes one batch of a shard's change log. What cannot be read
// or written for good (poison) is dead-lettered alone, and the rest of the
// batch is written: the shard never stops on it.
func (f *Flusher) flushShard(ctx context.Context, shard int) (int, error) {
	changes, bad, err := f.cache.ReadChanges(ctx, shard, f.opts.BatchSize)
	if err != nil {
		return 0, err
	}
	if len(changes)+len(bad) == 0 {
		return 0, nil
	}
	if err := f.repairAppState(ctx, changes); err != nil {
		return 0, err
	}
	sb, err := f.buildBatch(ctx, shard, changes, bad)
	if err != nil {
		return 0, err
	}
	if err := f.db.Apply(ctx, sb.batch); err != nil {
		if !persist.IsPermanent(err) {
			return 0, fmt.Errorf("apply batch: %w", err)
		}
		// Something in the batch is refused for good: write it unit by
		// unit, and dead-letter what is refused.
		rejected, err := f.db.ApplyEach(ctx, sb.batch)
		if err != nil {
			return 0, err
		}
		sb.reject(rejected)
	}
	sb.conflicts(sb.batch.Outcome.Conflicts)
	sb.rebased(sb.batch.Outcome)
	if err := f.putBackApps(ctx, sb.batch.Outcome.AppsBehind); err != nil {
		return 0, err
	}
	return len(sb.ids), f.finish(ctx, sb)
}

// finish records a committed batch in Redis, then acknowledges its entries
// and pushes its dead letters. Every write here runs when Redis is full.
func (f *Flusher) finish(ctx context.Context, sb *shardBatch) error {
	if err := f.cache.MarkFlushed(ctx, sb.marks, f.opts.CacheTTL, f.opts.MaxCachedEvents); err != nil {
		return err
	}
	for _, d := range sb.dead {
		f.opts.Logger.Error("adksession flusher: dead-lettered", "shard", sb.shard, "id", d.Change.EntryID, "unit", d.Unit, "reason", d.Reason)
	}
	if err := f.cache.Ack(ctx, sb.shard, sb.ids, sb.dead); err != nil {
		return err
	}
	// After the dead letters are pushed: a crash in between makes another
	// flusher dead-letter the state again rather than never.
	for _, st := range sb.deadStates {
		if err := f.cache.MarkStateDead(ctx, st.AppName, st.UserID, st.Rev); err != nil {
			return err
		}
	}
	f.batches.Add(1)
	f.entries.Add(int64(len(sb.ids) - len(sb.deadEntry)))
	f.events.Add(int64(sb.eventsWritten()))
	f.dead.Add(int64(len(sb.dead)))
	return nil
}

// writeStats refreshes the summary dashboards read (cache.Store.Stats). A
// flusher at work writes all of it, at most once a second and once more
// when it finds nothing left; an idle one, on its slow poll, only notes that
// the backlog is empty (one command), so that readers can tell a live, idle
// write-behind from one nobody runs without scanning every shard.
func (f *Flusher) writeStats(ctx context.Context, worked bool, lens []int64) {
	now := time.Now().UnixMilli()
	last := f.statsAt.Load()
	if !worked && !f.statsDirty.Swap(false) {
		var backlog int64
		for _, n := range lens {
			backlog += n
		}
		if backlog == 0 && now-last >= idleStatsEvery.Milliseconds() && f.statsAt.CompareAndSwap(last, now) {
			_ = f.cache.WriteStats(ctx, map[string]any{"backlog": 0, "lag_ms": 0, "updated_ms": now})
		}
		return
	}
	if worked {
		f.statsDirty.Store(true)
	}
	if worked && now-last < 1000 || !f.statsAt.CompareAndSwap(last, now) {
		return
	}
	b, err := f.cache.Backlog(ctx)
	if err != nil {
		return
	}
	s := f.Stats()
	_ = f.cache.WriteStats(ctx, map[string]any{
		"backlog": b.Entries, "lag_ms": b.Lag.Milliseconds(), "dead_letters": b.Dead,
		"batches": s.Batches, "entries": s.Entries, "events": s.Events, "retries": s.Retries,
		"updated_ms": time.Now().UnixMilli(), "last_error": s.LastError,
	})
}

// idleStatsEvery is how often an idle flusher notes an empty backlog.
const idleStatsEvery = 10 * time.Second
