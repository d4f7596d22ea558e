package loader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// hydrateSession reads a session and its newest events from the database
// and puts them into Redis, with its user's state when Redis lost that too:
// once the database has answered that the session exists (its first events
// row, or the load's end), the user's state is put back beside the events
// (restoreUserState), so that its reads overlap the events' load, conversion
// and put-back. For a cold read (cold not nil) the put-back's MULTI reads the
// session too (cache.Store.HydrateGet), once the user's state is back: its
// answer is cold.snap.
func (l *Loader) hydrateSession(ctx context.Context, ref base.SessionRef, cold *coldRead) error {
	var (
		userOnce    sync.Once
		userStarted atomic.Bool
		userDone    = make(chan struct{})
		userErr     error
	)
	startUser := func() {
		userOnce.Do(func() {
			userStarted.Store(true)
			go func() {
				defer close(userDone)
				userErr = l.restoreUserState(ctx, ref.App, ref.User)
			}()
		})
	}
	prepare := func(r *persist.EventRow) (string, error) {
		startUser()
		return apiEvent(r)
	}
	err := l.guarded(ctx, ref, func(guard cache.ReadGuard) error {
		s, err := l.db.LoadSessionEvents(ctx, ref, persist.Window{NumRecentEvents: l.opts.MaxCachedEvents}, prepare)
		if errors.Is(err, base.ErrNotFound) {
			return base.SessionError(base.ErrNotFound, ref.App, ref.User, ref.ID)
		}
		if err != nil {
			return fmt.Errorf("load %s from the database: %w", ref.String(), err)
		}
		startUser()
		h := cache.HydrateArgs{
			SessionRef: ref, Incarnation: s.Incarnation,
			CreateTime: s.CreateTime.UnixMicro(), UpdateTime: s.UpdateTime.UnixMicro(), Rev: s.Rev,
			State: statePairs(s.State), Guard: guard,
		}
		if h.Events, err = records(s.Events); err != nil {
			return err
		}
		if cold == nil {
			_, err = l.cache.Hydrate(ctx, h, l.opts.CacheTTL)
			return err
		}
		<-userDone
		decoded := l.decodeBeside(cache.WindowOf(h.Events, cold.args))
		_, cold.snap, err = l.cache.HydrateGet(ctx, h, l.opts.CacheTTL, cold.args)
		if d := <-decoded; cold.snap != nil && d.err == nil {
			cold.snap.Decoded = d.v
		}
		return err
	})
	if userStarted.Load() {
		<-userDone
		if err == nil {
			err = userErr
		}
	}
	return err
}

// decodeBeside decodes events (Options.Decode) on a goroutine of its own;
// the channel brings the result (nothing decoded without a decoder).
func (l *Loader) decodeBeside(events []cache.EventRecord) <-chan decodeResult {
	out := make(chan decodeResult, 1)
	if l.opts.Decode == nil {
		out <- decodeResult{}
		return out
	}
	go func() {
		v, err := l.opts.Decode(events)
		out <- decodeResult{v, err}
	}()
	return out
}

type decodeResult struct {
	v   any
	err error
}

// coldRead is a Get (not of a compacted view) whose session Redis lost:
// hydrateSession reads it in the MULTI that puts it back and leaves the
// answer in snap (nil: read it again).
type coldRead struct {
	args cache.GetArgs
	snap *cache.Snapshot
}

// restoreUserState puts a user's state back (hydrateUser) unless Redis
// holds it.
func (l *Loader) restoreUserState(ctx context.Context, app, user string) error {
	if _, ok, err := l.cache.UserState(ctx, app, user); err != nil || ok {
		return err
	}
	return l.hydrateUser(ctx, app, user)
}

// maxGuardedReads bounds the reads of one cold read whose guard the
// flusher keeps moving (see cache.ReadGuard). A field moves when a session
// sharing it is flushed: at the default 64 shards × 128 fields even 25 000
// flushed sessions a second move one about 3 times a second, and a read of
// a few ms goes again about once in a hundred; with one shard, about 200
// times a second, and more than half of the reads go again: that all 64
// go again is still improbable (0.6^64 ≈ 1e-14).
const maxGuardedReads = 64

// guarded runs read, a cold read of the database that puts what it read
// back into Redis under guard, the read guard of session ref (ref.ID "" for
// its user's own), read first; again while its guard moved meanwhile
// (the flusher wrote newer data or a delete to the database, and Redis may
// have let go of it: docs/design.md, "Cold reads").
func (l *Loader) guarded(ctx context.Context, ref base.SessionRef, read func(guard cache.ReadGuard) error) error {
	for i := 1; ; i++ {
		guard, err := l.cache.ReadGuard(ctx, ref)
		if err != nil {
			return err
		}
		if err = read(guard); !errors.Is(err, cache.ErrReadOutdated) || i == maxGuardedReads {
			return err
		}
	}
}

// hydrateUser puts a user's state back into Redis, and completes the
// user's session index if Redis lost it.
func (l *Loader) hydrateUser(ctx context.Context, app, user string) error {
	err := l.guarded(ctx, base.SessionRef{App: app, User: user}, func(guard cache.ReadGuard) error {
		state, v, err := l.db.LoadUserState(ctx, app, user)
		if err != nil {
			return fmt.Errorf("load user state of %s from the database: %w", user, err)
		}
		_, err = l.cache.HydrateUser(ctx, app, user, v.Rev, v.Flushes, statePairs(state), l.opts.CacheTTL, guard)
		return err
	})
	if err != nil {
		return err
	}
	return l.completeUserIndex(ctx, app, user)
}

// hydrateApp puts an app's state from the database into Redis unless Redis
// holds it.
func (l *Loader) hydrateApp(ctx context.Context, app string) error {
	state, rev, err := l.db.LoadAppState(ctx, app)
	if err != nil {
		return fmt.Errorf("load app state of %s: %w", app, err)
	}
	_, err = l.cache.HydrateApp(ctx, app, rev, statePairs(state))
	return err
}

// statePairs turns a state read from the database into cache pairs.
func statePairs[V ~[]byte](m map[string]V) []cache.Pair {
	out := make([]cache.Pair, 0, len(m))
	for k, v := range m {
		out = append(out, cache.Pair{Key: k, Value: string(v)})
	}
	return out
}
