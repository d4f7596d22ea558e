package loader

import (
	"context"
	"errors"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// maxRecoveries bounds how many times Run puts back what Redis lost for one
// operation: each put-back is followed by one more attempt, and eviction
// under memory pressure could otherwise undo them forever.
const maxRecoveries = 3

// Run runs op, a script call on session ref — on its user's or its app's
// state alone when ref.User or ref.ID is "" — and owns "Redis
// lost it": while op reports one of the cache's not-cached statuses
// (cache.ErrNotCached or ErrIncomplete: the session; ErrUserNotCached: the
// user's state and index; ErrAppNotCached: the app's state) and a database
// backs the cache, it puts that back from the database and runs op again, at
// most maxRecoveries times. op must be safe to run again: the scripts refuse
// before their first write when they lack data.
//
// It returns op's last error, with the session's answer for what is not
// there: a deleted session (cache.ErrDeleted), or one Redis does not hold
// without a database, or one the database does not hold either, is
// base.ErrNotFound naming the session. Other errors come back as op
// returned them (a not-cached status when every put-back was lost again).
func (l *Loader) Run(ctx context.Context, ref base.SessionRef, op func() error) error {
	return l.run(ctx, ref, op, nil)
}

// run is Run; a session put back for cold (not nil) is read in the same
// MULTI (hydrateSession).
func (l *Loader) run(ctx context.Context, ref base.SessionRef, op func() error, cold *coldRead) error {
	err := op()
	for n := 0; n < maxRecoveries && l.durable && isNotCached(err); n++ {
		if err = l.restore(ctx, ref, err, cold); err != nil {
			return err
		}
		err = op()
	}
	if errors.Is(err, cache.ErrDeleted) || (!l.durable && errors.Is(err, cache.ErrNotCached)) {
		return base.SessionError(base.ErrNotFound, ref.App, ref.User, ref.ID)
	}
	return err
}

// AppOrder takes the order number of an app-state change (the first step
// of a write with app: keys; pairs are checked against the cap of the app's
// state, see cache.Store.AppOrder), putting the app's state back from the
// database first when Redis lost it: when the database cannot answer, the
// write fails before anything is written.
func (l *Loader) AppOrder(ctx context.Context, app string, pairs []cache.Pair) (int64, error) {
	var n int64
	err := l.Run(ctx, base.SessionRef{App: app}, func() (err error) {
		n, err = l.cache.AppOrder(ctx, app, pairs)
		return err
	})
	return n, err
}

// ApplyApp applies an app-state change to Redis once per change id, in
// order (the second step of a write, and the flusher's repair of it),
// putting the app's state back from the database first when Redis lost it.
func (l *Loader) ApplyApp(ctx context.Context, app string, c cache.AppChange) error {
	return l.Run(ctx, base.SessionRef{App: app}, func() error { return l.cache.ApplyApp(ctx, app, c) })
}

// isNotCached tells whether a script failed for want of data Redis lost.
func isNotCached(err error) bool {
	return errors.Is(err, cache.ErrNotCached) || errors.Is(err, cache.ErrIncomplete) ||
		errors.Is(err, cache.ErrUserNotCached) || errors.Is(err, cache.ErrAppNotCached)
}

// restore puts back into Redis what a script reported missing (cause, one
// of isNotCached's statuses), reading it from the database: the session
// (with its user's state when that is gone too), the user's state and
// index, or the app's state. base.ErrNotFound (wrapped by
// base.SessionError) when the database has no such session either.
func (l *Loader) restore(ctx context.Context, ref base.SessionRef, cause error, cold *coldRead) error {
	switch {
	case errors.Is(cause, cache.ErrUserNotCached):
		return l.hydrateUser(ctx, ref.App, ref.User)
	case errors.Is(cause, cache.ErrAppNotCached):
		return l.hydrateApp(ctx, ref.App)
	case errors.Is(cause, cache.ErrNotCached), errors.Is(cause, cache.ErrIncomplete):
		return l.hydrateSession(ctx, ref, cold)
	}
	return cause
}
