package cache

import (
	"context"
	"fmt"
	"time"
)

// HydrateArgs is a session read from the database, to put back into Redis.
type HydrateArgs struct {
	App, User, SID                      string
	Incarnation, CreateTime, UpdateTime int64 // µs
	Rev                                 int64 // last seq; everything up to it is in the database
	State                               []Pair
	// Events are the newest events, ascending and consecutive up to Rev,
	// JSON in API form, with their IDs.
	Events []EventRecord
	// Guard is the session's read guard, read before the database.
	Guard ReadGuard
}

// Hydrate puts a session back into Redis unless Redis already holds it (a
// concurrent append or another loader won); it reports whether it wrote.
// The user's session index, when Redis holds it, follows the session's
// update time (unless it holds a later one).
// ErrReadOutdated when the read's guard moved (read the database again).
func (s *Store) Hydrate(ctx context.Context, h HydrateArgs, ttl time.Duration) (bool, error) {
	k := s.keys.Session(h.App, h.User, h.SID)
	args := []any{h.Incarnation, h.CreateTime, h.UpdateTime, h.Rev, ttl.Milliseconds()}
	args = appendPairs(args, h.State)
	args = append(args, len(h.Events))
	for _, e := range h.Events {
		args = append(args, e.Seq, e.Ts, e.ID, e.JSON)
	}
	args = append(args, h.Guard.field, h.Guard.value, h.SID)
	n, err := s.run(ctx, hydrateScript, []string{k.Session, k.Events, k.EventIDs, k.Undo, h.Guard.key, k.Temp, k.UserIndex}, args...).Int64()
	return guardedResult(n, err, "hydrate session "+h.SID)
}

// guardedResult is the result of a hydrate script: whether it wrote (1)
// or found Redis holding it (0), or its status as an error (-11:
// ErrReadOutdated).
func guardedResult(n int64, err error, what string) (bool, error) {
	switch {
	case err != nil:
		return false, fmt.Errorf("%s: %w", what, err)
	case n < 0:
		return false, fmt.Errorf("%s: %w", what, hydrateStatuses.err(n))
	}
	return n == 1, nil
}

// HydrateUser puts a user's state read from the database back into Redis
// unless present; it reports whether it wrote. guard is the user's read
// guard, read before the database: ErrReadOutdated when it moved.
// flushes is the flush count the database records with the row (the
// hash's m:fc starts there: see state_read.lua).
func (s *Store) HydrateUser(ctx context.Context, app, user string, rev, flushes int64, state []Pair, ttl time.Duration, guard ReadGuard) (bool, error) {
	args := appendPairs([]any{rev, flushes, ttl.Milliseconds()}, state)
	args = append(args, guard.field, guard.value)
	n, err := s.run(ctx, hydrateStateScript, []string{s.keys.Session(app, user, "").User, guard.key}, args...).Int64()
	return guardedResult(n, err, "hydrate user "+user)
}

// HydrateApp puts an app's state read from the database back into Redis
// unless present. App state never expires.
func (s *Store) HydrateApp(ctx context.Context, app string, rev int64, state []Pair) (bool, error) {
	args := appendPairs([]any{rev, 0, ""}, state)
	n, err := s.run(ctx, hydrateStateScript, []string{s.keys.App(app).State}, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("hydrate app %s: %w", app, err)
	}
	return n == 1, nil
}
