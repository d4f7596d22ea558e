// Package loader is adksession's read path: cache-first reads of sessions
// with their event windows, and (with a database) read-through when Redis no
// longer holds a session, rehydrating Redis atomically (hydrate.lua writes
// only if no append or other loader got there first).
//
// It is internal to adksession: its exported names serve package service and
// may change at any time. Programs use package service.
package loader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache"
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
// database for what Redis no longer holds (putting it back), and older
// events than the cached tail from the database when the window reaches
// past it.
func (l *Loader) Get(ctx context.Context, a cache.GetArgs) (*cache.Snapshot, error) {
	for attempt := 0; ; attempt++ {
		snap, err := l.cache.Get(ctx, a)
		if err == nil {
			if err := l.completeApp(ctx, a.App, snap); err != nil {
				return nil, err
			}
			return snap, l.olderEvents(ctx, a, snap)
		}
		if errors.Is(err, cache.ErrDeleted) || (l.opts.DB == nil && errors.Is(err, cache.ErrNotCached)) {
			return nil, cache.SessionError(cache.ErrNotFound, a.App, a.User, a.SID)
		}
		if attempt == 2 || l.opts.DB == nil {
			return nil, err
		}
		if err := l.Recover(ctx, a.App, a.User, a.SID, err); err != nil {
			return nil, err
		}
	}
}

// Recover puts back into Redis what a script reported missing (cause:
// cache.ErrNotCached, ErrIncomplete, ErrUserNotCached or ErrAppNotCached),
// reading it from the database. cache.ErrNotFound (wrapped by
// cache.SessionError) when the database has no such session either.
func (l *Loader) Recover(ctx context.Context, app, user, sid string, cause error) error {
	if l.opts.DB == nil {
		return cause
	}
	switch {
	case errors.Is(cause, cache.ErrUserNotCached):
		return l.hydrateUser(ctx, app, user)
	case errors.Is(cause, cache.ErrAppNotCached):
		return persist.HydrateAppState(ctx, l.opts.DB, l.cache, app)
	case errors.Is(cause, cache.ErrNotCached), errors.Is(cause, cache.ErrIncomplete):
		return l.hydrateSession(ctx, app, user, sid)
	}
	return cause
}

// hydrateSession reads a session and its newest events from the database
// and puts them into Redis.
func (l *Loader) hydrateSession(ctx context.Context, app, user, sid string) error {
	key := persist.SessionKey{AppName: app, UserID: user, SessionID: sid}
	s, err := l.opts.DB.LoadSession(ctx, key, persist.Window{NumRecentEvents: l.opts.MaxCachedEvents})
	if errors.Is(err, cache.ErrNotFound) {
		return cache.SessionError(cache.ErrNotFound, app, user, sid)
	}
	if err != nil {
		return fmt.Errorf("load session %s from the database: %w", sid, err)
	}
	h := cache.HydrateArgs{
		App: app, User: user, SID: sid, Incarnation: s.Incarnation,
		CreateTime: s.CreateTime.UnixMicro(), UpdateTime: s.UpdateTime.UnixMicro(), Rev: s.Rev,
		State: persist.StatePairs(s.State),
	}
	if h.Events, err = records(s.Events); err != nil {
		return err
	}
	if _, err := l.cache.Hydrate(ctx, h, l.opts.CacheTTL); err != nil {
		return err
	}
	if _, ok, err := l.cache.UserState(ctx, app, user); err != nil || ok {
		return err
	}
	return l.hydrateUser(ctx, app, user)
}

// hydrateUser puts a user's state back into Redis, and completes the
// user's session index if Redis lost it.
func (l *Loader) hydrateUser(ctx context.Context, app, user string) error {
	state, rev, err := l.opts.DB.LoadUserState(ctx, app, user)
	if err != nil {
		return fmt.Errorf("load user state of %s from the database: %w", user, err)
	}
	if _, err := l.cache.HydrateUser(ctx, app, user, rev, persist.StatePairs(state), l.opts.CacheTTL); err != nil {
		return err
	}
	return l.completeUserIndex(ctx, app, user)
}

// completeApp fills in the app state when Redis has lost it.
func (l *Loader) completeApp(ctx context.Context, app string, snap *cache.Snapshot) error {
	if l.opts.DB == nil || snap.AppCached {
		return nil
	}
	if err := persist.HydrateAppState(ctx, l.opts.DB, l.cache, app); err != nil {
		return err
	}
	m, err := l.cache.AppState(ctx, app)
	snap.App = m
	return err
}

// olderEvents adds events older than the cached tail when the window
// reaches past it.
func (l *Loader) olderEvents(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot) error {
	if l.opts.DB == nil || snap.First <= 1 {
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
		js, err := persist.APIEvent(r)
		if err != nil {
			return nil, err
		}
		out[i] = cache.EventRecord{Seq: r.Seq, Ts: r.Timestamp.UnixMicro(), JSON: string(js), ID: r.ID}
	}
	return out, nil
}
