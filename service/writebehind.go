package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/adksession/adksession/loader"
)

// Backlog is the state of the write-behind across all shards.
type Backlog struct {
	Entries int64         // unflushed change-log entries
	Oldest  time.Time     // time of the oldest unflushed entry (zero when none)
	Lag     time.Duration // age of the oldest unflushed entry
	Dead    int64         // dead letters
}

// FlusherStats are the counters of one flusher since it was made.
type FlusherStats struct {
	// Batches and Entries written, and the Events they held.
	Batches, Entries, Events int64
	// Retries of batches after a database error.
	Retries int64
	// DeadLetters written: changes the database refused for good.
	DeadLetters int64
	// LastError is the last error the flusher met ("" when none).
	LastError string
}

// Backlog reports the write-behind's unflushed entries, lag and dead letters,
// reading every shard (one pipeline).
func (s *Service) Backlog(ctx context.Context) (Backlog, error) {
	b, err := s.cache.Backlog(ctx)
	return Backlog(b), err
}

// RecentBacklog is Backlog as the flushers last reported it (one Redis
// command), for dashboards that poll: busy flushers report every second, idle
// ones every 10 to 16 s; when none has reported for a minute it is read from
// every shard, as Backlog.
func (s *Service) RecentBacklog(ctx context.Context) (Backlog, error) {
	b, err := s.cache.RecentBacklog(ctx, time.Minute)
	return Backlog(b), err
}

// FlusherStats are the counters of the flusher Open started in this process
// (zero without one).
func (s *Service) FlusherStats() FlusherStats {
	if s.flusher == nil {
		return FlusherStats{}
	}
	return flusherStats(s.flusher.Stats())
}

func flusherStats(st loader.FlusherStats) FlusherStats {
	return FlusherStats{Batches: st.Batches, Entries: st.Entries, Events: st.Events, Retries: st.Retries,
		DeadLetters: st.DeadLetters, LastError: st.LastError}
}

// Flusher is one more flusher of a service's change log into its database,
// besides the one Open starts (unless Config.DisableFlusher): several
// flushers share the shards through leases. `adksession flush` needs none:
// it opens a Service, whose own flusher drains. A Flusher is safe for
// concurrent use.
type Flusher struct {
	f *loader.Flusher
}

// NewFlusher returns a flusher of this service's change log into its
// database (nil without a database), with the service's Config (batch size,
// interval, lease, cache TTL). It runs only when started (Start) or driven
// pass by pass (RunOnce). logger nil: slog.Default().
func (s *Service) NewFlusher(logger *slog.Logger) *Flusher {
	f := s.newFlusher(logger)
	if f == nil {
		return nil
	}
	return &Flusher{f: f}
}

func (s *Service) newFlusher(logger *slog.Logger) *loader.Flusher {
	if s.db == nil {
		return nil
	}
	return loader.NewFlusher(s.db, s.cache, loader.FlusherOptions{
		BatchSize: s.cfg.FlushBatchSize, Interval: s.cfg.FlushInterval, CacheTTL: s.cfg.CacheTTL, LeaseTTL: s.cfg.FlushLeaseTTL,
		MaxCachedEvents: s.cfg.MaxCachedEvents, Logger: logger, AppState: s.loader,
	})
}

// Start runs the flusher in the background until Stop. Calling it again is
// a no-op.
func (f *Flusher) Start(ctx context.Context) { f.f.Start(ctx) }

// Stop ends the background loop, drains what is left (retrying failed
// passes with the loop's capped backoff until ctx ends) and gives the
// flusher's shard leases up at once. Calling it again is a no-op.
func (f *Flusher) Stop(ctx context.Context) error { return f.f.Stop(ctx) }

// RunOnce does one pass: a batch from every shard that has changes and whose
// lease this flusher gets. It returns the number of entries flushed. A
// flusher that is never stopped keeps its leases until they expire
// (Config.FlushLeaseTTL), as a crashed process does.
func (f *Flusher) RunOnce(ctx context.Context) (int, error) { return f.f.RunOnce(ctx) }

// Stats returns the flusher's counters.
func (f *Flusher) Stats() FlusherStats { return flusherStats(f.f.Stats()) }
