// Package loader is adksession's read path: cache-first reads of sessions
// with their event windows, and (with a database) read-through with
// rehydration when Redis no longer holds a session.
package loader

import (
	"context"
	"errors"

	"github.com/adksession/adksession/cache"
)

// ErrNotFound: neither Redis nor the database has the session.
var ErrNotFound = errors.New("adksession: session not found")

// Loader reads sessions.
type Loader struct {
	cache *cache.Store
}

// New returns a Loader over the cache.
func New(c *cache.Store) *Loader {
	return &Loader{cache: c}
}

// Get reads a session with a window of events.
func (l *Loader) Get(ctx context.Context, a cache.GetArgs) (*cache.Snapshot, error) {
	snap, err := l.cache.Get(ctx, a)
	switch {
	case errors.Is(err, cache.ErrNotCached), errors.Is(err, cache.ErrDeleted):
		return nil, ErrNotFound
	case err != nil:
		return nil, err
	}
	return snap, nil
}
