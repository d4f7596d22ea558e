package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
)

// FlusherOptions configure a Flusher; zero values take the defaults.
type FlusherOptions struct {
	BatchSize       int           // change-log entries per transaction (default 500)
	Interval        time.Duration // poll interval while there is work (default 100ms)
	MaxIdleInterval time.Duration // longest poll interval when idle (default 10 × Interval)
	CacheTTL        time.Duration // TTL of idle, fully flushed sessions (default 24h)
	MaxCachedEvents int           // flushed events a session keeps in Redis (default 1000)
	LeaseTTL        time.Duration // how long a shard stays with a flusher that stopped renewing (default 15s)
	MaxBackoff      time.Duration // cap of the retry backoff on database errors (default 30s)
	Logger          *slog.Logger
}

func (o FlusherOptions) withDefaults() FlusherOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.MaxIdleInterval < o.Interval {
		o.MaxIdleInterval = 10 * o.Interval
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 24 * time.Hour
	}
	if o.MaxCachedEvents <= 0 {
		o.MaxCachedEvents = 1000
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 15 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

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
	db    *Store
	cache *cache.Store
	opts  FlusherOptions
	owner string

	notify chan struct{}

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	passes  chan struct{} // closed and replaced after every pass
	stopped bool

	batches, entries, events, retries, dead atomic.Int64
	lastErr                                 atomic.Value
	statsAt                                 atomic.Int64 // unix ms of the last stats write
}

// NewFlusher returns a flusher that writes db from the change log of c.
func NewFlusher(db *Store, c *cache.Store, o FlusherOptions) *Flusher {
	return &Flusher{db: db, cache: c, opts: o.withDefaults(), owner: uuid.NewString(),
		notify: make(chan struct{}, 1), passes: make(chan struct{})}
}

// Start runs the flusher loop in the background until Stop. Calling it
// again is a no-op.
func (f *Flusher) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil || f.stopped {
		return
	}
	ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	f.done = make(chan struct{})
	go f.loop(ctx)
}

// Stop ends the loop, then drains what is left, bounded by ctx, and gives up
// the flusher's leases. Calling it again is a no-op.
func (f *Flusher) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	cancel, done := f.cancel, f.done
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	var err error
	for {
		n, e := f.RunOnce(ctx)
		if e != nil || n == 0 {
			err = e
			break
		}
	}
	for shard := range f.cache.Keys().Shards() {
		if e := f.cache.ReleaseLease(context.WithoutCancel(ctx), shard, f.owner); e != nil && err == nil {
			err = e
		}
	}
	return err
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
	defer close(f.done)
	// Idle polls back off from Interval to MaxIdleInterval, so that a fleet
	// of idle processes does not poll every shard ten times a second; work
	// found, or a Kick, brings the interval back.
	idle := f.opts.Interval
	backoff := time.Duration(0)
	var lastLog time.Time
	for {
		n, err := f.RunOnce(ctx)
		f.endPass()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			f.retries.Add(1)
			f.lastErr.Store(err.Error())
			backoff = min(max(2*backoff, f.opts.Interval), f.opts.MaxBackoff)
			if time.Since(lastLog) > 10*time.Second {
				f.opts.Logger.Warn("adksession flusher: pass failed, retrying", "err", err, "backoff", backoff)
				lastLog = time.Now()
			}
			jitter := time.Duration(rand.Int64N(int64(backoff)/5 + 1))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff + jitter):
			}
			continue
		case n > 0:
			backoff, idle = 0, f.opts.Interval
			continue // more may be waiting
		}
		backoff = 0
		timer := time.NewTimer(idle)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
			idle = min(2*idle, f.opts.MaxIdleInterval)
		case <-f.notify:
			timer.Stop()
			idle = f.opts.Interval
		}
	}
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
	total := 0
	var errs []error
	for shard, n := range lens {
		if n == 0 {
			continue
		}
		ok, err := f.cache.AcquireLease(ctx, shard, f.owner, f.opts.LeaseTTL)
		if err != nil {
			errs = append(errs, fmt.Errorf("lease of shard %d: %w", shard, err))
			continue
		}
		if !ok {
			continue
		}
		done, err := f.flushShard(ctx, shard)
		total += done
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", shard, err))
		}
	}
	f.writeStats(ctx)
	return total, errors.Join(errs...)
}

// flushShard writes one batch of a shard's change log.
func (f *Flusher) flushShard(ctx context.Context, shard int) (int, error) {
	changes, bad, err := f.cache.ReadChanges(ctx, shard, f.opts.BatchSize)
	if err != nil {
		return 0, err
	}
	if err := f.deadLetter(ctx, shard, bad); err != nil {
		return 0, err
	}
	if len(changes) == 0 {
		return len(bad), nil
	}
	groups := groupChanges(changes)
	if err := f.repairAppState(ctx, changes); err != nil {
		return 0, err
	}
	batch, marks, err := f.buildBatch(ctx, groups)
	if err != nil {
		return 0, err
	}
	if err := f.db.Apply(ctx, batch); err != nil {
		if !isPermanent(err) {
			return 0, fmt.Errorf("apply batch: %w", err)
		}
		return f.applyOneByOne(ctx, shard, groups)
	}
	return len(changes), f.finish(ctx, shard, changes, marks, batch)
}

// applyOneByOne isolates the sessions the database rejects for good: each
// is dead-lettered, the rest written.
func (f *Flusher) applyOneByOne(ctx context.Context, shard int, groups []*sessionChanges) (int, error) {
	n := 0
	for _, g := range groups {
		one := []*sessionChanges{g}
		batch, marks, err := f.buildBatch(ctx, one)
		if err != nil {
			return n, err
		}
		if err := f.db.Apply(ctx, batch); err != nil {
			if !isPermanent(err) {
				return n, fmt.Errorf("apply batch: %w", err)
			}
			dl := make([]cache.DeadLetter, len(g.changes))
			for i, c := range g.changes {
				dl[i] = cache.DeadLetter{Change: c, Reason: err.Error()}
			}
			if err := f.deadLetter(ctx, shard, dl); err != nil {
				return n, err
			}
			continue
		}
		if err := f.finish(ctx, shard, g.changes, marks, batch); err != nil {
			return n, err
		}
		n += len(g.changes)
	}
	return n, nil
}

func (f *Flusher) deadLetter(ctx context.Context, shard int, dl []cache.DeadLetter) error {
	if len(dl) == 0 {
		return nil
	}
	for _, d := range dl {
		f.opts.Logger.Error("adksession flusher: change dead-lettered", "shard", shard, "id", d.Change.ID, "reason", d.Reason)
	}
	f.dead.Add(int64(len(dl)))
	return f.cache.PushDeadLetters(ctx, shard, dl)
}

// finish records a committed batch in Redis and acknowledges its entries.
func (f *Flusher) finish(ctx context.Context, shard int, changes []cache.Change, marks []cache.Flushed, batch *Batch) error {
	if err := f.cache.MarkFlushed(ctx, marks, f.opts.CacheTTL, f.opts.MaxCachedEvents); err != nil {
		return err
	}
	ids := make([]string, len(changes))
	for i, c := range changes {
		ids[i] = c.ID
	}
	if err := f.cache.AckChanges(ctx, shard, ids); err != nil {
		return err
	}
	events := 0
	for _, s := range batch.Sessions {
		events += len(s.Events)
	}
	f.batches.Add(1)
	f.entries.Add(int64(len(changes)))
	f.events.Add(int64(events))
	return nil
}

// sessionChanges are one session's entries of a batch, in log order.
type sessionChanges struct {
	key     SessionKey
	changes []cache.Change
}

func groupChanges(changes []cache.Change) []*sessionChanges {
	var out []*sessionChanges
	idx := map[SessionKey]*sessionChanges{}
	for _, c := range changes {
		k := SessionKey{AppName: c.App, UserID: c.User, SessionID: c.SID}
		g := idx[k]
		if g == nil {
			g = &sessionChanges{key: k}
			idx[k] = g
			out = append(out, g)
		}
		g.changes = append(g.changes, c)
	}
	return out
}

// repairAppState applies the app deltas of the batch's entries to Redis
// again: a no-op for those their writer applied, the repair for a writer
// that died between its two steps.
func (f *Flusher) repairAppState(ctx context.Context, changes []cache.Change) error {
	for _, c := range changes {
		if c.AppDelta == "" {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.AppDelta), &m); err != nil {
			continue // dead-lettered with its session if the database rejects it
		}
		pairs := make([]cache.Pair, 0, len(m))
		for k, v := range m {
			pairs = append(pairs, cache.Pair{Key: k, Value: string(v)})
		}
		id := c.EventID
		if c.Kind == 'c' {
			id = cache.CreateChangeID(c.Incarnation, c.User, c.SID)
		}
		if err := ApplyAppState(ctx, f.db, f.cache, c.App, id, pairs); err != nil {
			return err
		}
	}
	return nil
}

// buildBatch reads what the groups' sessions are now in Redis and makes the
// batch that writes it, with what to record in Redis once it is committed.
func (f *Flusher) buildBatch(ctx context.Context, groups []*sessionChanges) (*Batch, []cache.Flushed, error) {
	b := &Batch{}
	var refs []cache.FlushRef
	var upserts []*sessionChanges
	var marks []cache.Flushed
	apps := map[string]bool{}
	var deleteMarks []int // indexes in marks of the deletes' marks
	for _, g := range groups {
		for _, c := range g.changes {
			if c.AppDelta != "" {
				apps[c.App] = true // also of changes a later delete voids: app state stays
			}
		}
		live := g.changes
		for i := len(g.changes) - 1; i >= 0; i-- {
			if c := g.changes[i]; c.Kind == 'd' {
				b.Deletes = append(b.Deletes, SessionDelete{Key: g.key, Incarnation: c.Incarnation})
				marks = append(marks, cache.Flushed{App: c.App, User: c.User, SID: c.SID, Incarnation: c.Incarnation, Seq: -1, UserRev: -1})
				deleteMarks = append(deleteMarks, len(marks)-1)
				live = g.changes[i+1:]
				break
			}
		}
		if len(live) == 0 {
			continue
		}
		last := live[len(live)-1]
		ref := cache.FlushRef{App: last.App, User: last.User, SID: last.SID, Incarnation: last.Incarnation, MinTs: 1, MaxTs: 0}
		for _, c := range live {
			if c.Kind != 'a' || c.Incarnation != last.Incarnation {
				continue
			}
			if ref.MinTs > ref.MaxTs {
				ref.MinTs, ref.MaxTs = c.Ts, c.Ts
			}
			ref.MinTs, ref.MaxTs = min(ref.MinTs, c.Ts), max(ref.MaxTs, c.Ts)
		}
		refs = append(refs, ref)
		upserts = append(upserts, g)
	}
	reads, err := f.cache.ReadForFlush(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	users := map[[2]string]bool{}
	for i, r := range reads {
		if r.Snap == nil {
			continue // deleted or re-created since: later entries carry it
		}
		ref := refs[i]
		up := SessionUpsert{
			Key: upserts[i].key, Incarnation: ref.Incarnation, Rev: r.Snap.Rev,
			State:      rawState(r.Snap.State),
			CreateTime: time.UnixMicro(r.Snap.CreateTime).UTC(), UpdateTime: time.UnixMicro(r.Snap.UpdateTime).UTC(),
		}
		seq := int64(0)
		for _, e := range r.Events {
			data, err := StorageForm([]byte(e.JSON))
			if err != nil {
				return nil, nil, fmt.Errorf("event %d of session %s: %w", e.Seq, ref.SID, err)
			}
			var head struct {
				ID           string `json:"id"`
				InvocationID string `json:"invocationId"`
			}
			if err := json.Unmarshal([]byte(e.JSON), &head); err != nil {
				return nil, nil, fmt.Errorf("event %d of session %s: %w", e.Seq, ref.SID, err)
			}
			up.Events = append(up.Events, EventRow{Key: up.Key, ID: head.ID, InvocationID: head.InvocationID,
				Timestamp: time.UnixMicro(e.Ts).UTC(), Seq: e.Seq, Data: data})
			seq = max(seq, e.Seq)
		}
		b.Sessions = append(b.Sessions, up)
		userRev := int64(-1)
		if uk := [2]string{ref.App, ref.User}; !users[uk] {
			users[uk] = true
			b.UserStates = append(b.UserStates, StateUpsert{AppName: ref.App, UserID: ref.User, Rev: r.Snap.UserRev,
				State: rawState(r.Snap.User), UpdateTime: up.UpdateTime})
			userRev = r.Snap.UserRev
		}
		marks = append(marks, cache.Flushed{App: ref.App, User: ref.User, SID: ref.SID, Incarnation: ref.Incarnation, Seq: seq, UserRev: userRev})
	}
	// The user state that deleted sessions changed stays (as app state
	// does): write it even when no live session of the user is in the batch.
	for _, i := range deleteMarks {
		m := &marks[i]
		uk := [2]string{m.App, m.User}
		if users[uk] {
			continue
		}
		users[uk] = true
		state, rev, ok, err := f.cache.UserStateRev(ctx, m.App, m.User)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			b.UserStates = append(b.UserStates, StateUpsert{AppName: m.App, UserID: m.User, Rev: rev,
				State: rawState(state), UpdateTime: time.Now().UTC()})
			m.UserRev = rev
		}
	}
	for app := range apps {
		state, rev, ok, err := f.cache.AppStateRev(ctx, app)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			b.AppStates = append(b.AppStates, StateUpsert{AppName: app, Rev: rev, State: rawState(state), UpdateTime: time.Now().UTC()})
		}
	}
	return b, marks, nil
}

func rawState(m map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}

// writeStats refreshes the summary dashboards read, at most once a second.
func (f *Flusher) writeStats(ctx context.Context) {
	now := time.Now().UnixMilli()
	if last := f.statsAt.Load(); now-last < 1000 || !f.statsAt.CompareAndSwap(last, now) {
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
