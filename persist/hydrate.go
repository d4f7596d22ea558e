package persist

import (
	"context"
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache"
)

// ApplyAppState applies an app-state delta to Redis once per id, first
// putting the app's state back from the database when Redis has lost it
// (app state has a slot of its own and is written in a second step).
func ApplyAppState(ctx context.Context, db *Store, c *cache.Store, app, id string, pairs []cache.Pair) error {
	err := c.ApplyApp(ctx, app, id, pairs)
	if !errors.Is(err, cache.ErrAppNotCached) {
		return err
	}
	if err := HydrateAppState(ctx, db, c, app); err != nil {
		return err
	}
	return c.ApplyApp(ctx, app, id, pairs)
}

// HydrateAppState puts an app's state from the database into Redis unless
// Redis holds it.
func HydrateAppState(ctx context.Context, db *Store, c *cache.Store, app string) error {
	state, rev, err := db.LoadAppState(ctx, app)
	if err != nil {
		return fmt.Errorf("load app state of %s: %w", app, err)
	}
	_, err = c.HydrateApp(ctx, app, rev, StatePairs(state))
	return err
}

// StatePairs turns a state read from the database into cache pairs.
func StatePairs[V ~[]byte](m map[string]V) []cache.Pair {
	out := make([]cache.Pair, 0, len(m))
	for k, v := range m {
		out = append(out, cache.Pair{Key: k, Value: string(v)})
	}
	return out
}
