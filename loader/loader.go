// Package loader is adksession's read path and the one owner of recovery:
// cache-first reads of sessions with their event windows, and (with a
// database) putting back what Redis no longer holds, atomically (hydrate.lua
// writes only if no append or other loader got there first). Every script
// call that may find its data gone runs through Loader.Run, which puts the
// session, user or app state back and runs the call again.
//
// It is internal to adksession: its exported names serve package service and
// may change at any time. Programs use package service.
package loader

import (
	"context"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/persist"
)

// Options configure a Loader.
type Options struct {
	DB              *persist.Store // nil: Redis only
	CacheTTL        time.Duration  // TTL of rehydrated (fully flushed) keys (service.Config.CacheTTL)
	MaxCachedEvents int            // events put back per session (service.Config.MaxCachedEvents)
}

// Loader reads sessions, cache first.
type Loader struct {
	cache *cache.Store
	opts  Options
}

// New returns a Loader over the cache (and the database of o). The values of
// o are used as given: service.Config holds their defaults.
func New(c *cache.Store, o Options) *Loader {
	return &Loader{cache: c, opts: o}
}

// Durable tells whether a database backs the cache.
func (l *Loader) Durable() bool { return l.opts.DB != nil }

// Get reads a session with a window of events: from Redis, from the
// database for what Redis no longer holds (putting it back, see Run), and
// older events than the cached tail from the database when the window
// reaches past it.
func (l *Loader) Get(ctx context.Context, a cache.GetArgs) (*cache.Snapshot, error) {
	var snap *cache.Snapshot
	err := l.Run(ctx, a.App, a.User, a.SID, func() (err error) {
		snap, err = l.cache.Get(ctx, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := l.completeApp(ctx, a.App, snap); err != nil {
		return nil, err
	}
	return snap, l.olderEvents(ctx, a, snap)
}

// completeApp fills in the app state when Redis has lost it.
func (l *Loader) completeApp(ctx context.Context, app string, snap *cache.Snapshot) error {
	if l.opts.DB == nil || snap.AppCached {
		return nil
	}
	if err := l.hydrateApp(ctx, app); err != nil {
		return err
	}
	m, err := l.cache.AppState(ctx, app)
	snap.App = m
	return err
}

// olderEvents adds events older than the cached tail when the window
// reaches past it.
func (l *Loader) olderEvents(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot) error {
	if l.opts.DB == nil || snap.First <= 1 || snap.Indexed {
		return nil
	}
	if a.NumRecent > 0 && len(snap.Events) >= a.NumRecent {
		return nil
	}
	if len(snap.Events) > 0 && snap.Events[0].Seq != snap.First {
		return nil // the window starts inside the cached tail
	}
	w := persist.Window{}
	if a.NumRecent > 0 {
		w.NumRecentEvents = a.NumRecent - len(snap.Events)
	}
	if a.After >= 0 {
		w.After = time.UnixMicro(a.After)
	}
	rows, err := l.opts.DB.LoadEvents(ctx, persist.SessionKey{AppName: a.App, UserID: a.User, SessionID: a.SID}, w, snap.First)
	if err != nil {
		return fmt.Errorf("load events of session %s from the database: %w", a.SID, err)
	}
	older, err := records(rows)
	if err != nil {
		return err
	}
	snap.Events = append(older, snap.Events...)
	return nil
}

func records(rows []persist.EventRow) ([]cache.EventRecord, error) {
	out := make([]cache.EventRecord, len(rows))
	for i, r := range rows {
		js, err := eventjson.APIEvent(r.Data, r.ID, r.InvocationID, r.Timestamp)
		if err != nil {
			return nil, err
		}
		out[i] = cache.EventRecord{Seq: r.Seq, Ts: r.Timestamp.UnixMicro(), JSON: string(js), ID: r.ID}
	}
	return out, nil
}
