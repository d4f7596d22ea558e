package cache

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// HydrateArgs is a session read from the database, to put back into Redis.
type HydrateArgs struct {
	base.SessionRef
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
//
// One MULTI: the events and their ids are staged by ZADD into keys of their
// own (StageKeys), hydrate.lua checks them and renames them into place, or
// leaves them, and the MULTI deletes what is left: an event passed to a
// script as an argument costs Redis several times what ZADD costs.
func (s *Store) Hydrate(ctx context.Context, h HydrateArgs, ttl time.Duration) (bool, error) {
	wrote, _, err := s.hydrate(ctx, h, ttl, nil)
	return wrote, err
}

// HydrateGet is Hydrate, then, when it wrote, in the same MULTI, the Get of
// a (not Compacted): nothing runs between the put-back and the read, so the
// window's events are those of h.Events, not read back. snap is nil when
// Hydrate did not write or the read did not answer the session (say, the
// user's state is not cached): the caller reads it again (Get).
func (s *Store) HydrateGet(ctx context.Context, h HydrateArgs, ttl time.Duration, a GetArgs) (wrote bool, snap *Snapshot, err error) {
	if a.Compacted || a.App != h.App || a.User != h.User || a.ID != h.ID {
		return false, nil, fmt.Errorf("hydrate %s: read another session's or a compacted view", h.String())
	}
	g, err := s.newSessionRead(ctx, a)
	if err != nil {
		return false, nil, err
	}
	return s.hydrate(ctx, h, ttl, g)
}

// hydrate is Hydrate, followed by the read g (nil: none) in its MULTI.
func (s *Store) hydrate(ctx context.Context, h HydrateArgs, ttl time.Duration, g *sessionRead) (bool, *Snapshot, error) {
	what := "hydrate " + h.String()
	if err := checkHydrated(h.Events, h.Rev); err != nil {
		return false, nil, fmt.Errorf("%s: %w", what, err)
	}
	k := s.keys.Session(h.App, h.User, h.ID)
	st := s.keys.Stage(h.App, h.User, h.ID)
	keys := []string{k.Session, k.Events, k.EventIDs, k.Undo, h.Guard.key, k.Temp, k.UserIndex, st.Events, st.EventIDs}
	args := []any{h.Incarnation, h.CreateTime, h.UpdateTime, h.Rev, ttl.Milliseconds()}
	args = appendPairs(args, h.State)
	args = append(args, len(h.Events), h.Guard.field, h.Guard.value, h.ID)
	events, ids := stagedMembers(h.Events)
	var read *redis.Cmd
	cmd, _ := s.txScript(ctx, hydrateScript, keys, args, func(pipe redis.Pipeliner, call func()) {
		pipe.Del(ctx, st.Events, st.EventIDs)
		for lo := 0; lo < len(events); lo += stageChunk {
			hi := min(lo+stageChunk, len(events))
			pipe.ZAdd(ctx, st.Events, events[lo:hi]...)
			pipe.ZAdd(ctx, st.EventIDs, ids[lo:hi]...)
		}
		call()
		pipe.Del(ctx, st.Events, st.EventIDs) // whatever the script answered, nothing staged outlives the MULTI
		if g != nil {
			read = s.pick(getScript).EvalSha(ctx, pipe, g.keys, g.args...)
			g.queue(ctx, pipe, false)
		}
	})
	n, err := cmd.Int64()
	wrote, err := guardedResult(n, err, what)
	if g == nil {
		return wrote, nil, err
	}
	// The read's answer waits for the cluster's app hash read, whatever
	// came of the put-back; it counts only when the put-back wrote.
	snap, rerr := g.snapshot(read, read.Err(), WindowOf(h.Events, g.a))
	if err != nil || !wrote || rerr != nil {
		snap = nil
	}
	return wrote, snap, err
}

// stageChunk is the most members one staging ZADD sends.
const stageChunk = 1000

// stagedMembers are the members of the staged events and ids zsets.
func stagedMembers(evs []EventRecord) (events, ids []redis.Z) {
	events, ids = make([]redis.Z, len(evs)), make([]redis.Z, len(evs))
	for i, e := range evs {
		seq := strconv.FormatInt(e.Seq, 10)
		events[i] = redis.Z{Score: float64(e.Ts), Member: seq + ":" + e.JSON}
		ids[i] = redis.Z{Score: float64(e.Seq), Member: e.ID}
	}
	return events, ids
}

// checkHydrated refuses events that are not the newest of a session at
// revision rev (ascending and consecutive seqs up to rev) or whose times
// are outside the scripts' range, before anything is sent. hydrate.lua
// checks what it can of the staged events without reading every one: the
// count, the first seq and the last.
func checkHydrated(evs []EventRecord, rev int64) error {
	for i, e := range evs {
		switch want := rev - int64(len(evs)) + int64(i) + 1; {
		case e.Seq != want:
			return fmt.Errorf("event %d of %d has seq %d, want %d", i+1, len(evs), e.Seq, want)
		case e.Seq < 1:
			return fmt.Errorf("event %d of %d has seq %d, below 1", i+1, len(evs), e.Seq)
		case e.Ts < 0 || e.Ts > maxScore:
			return fmt.Errorf("event %d of %d: time %d µs is outside [0, 2^53)", i+1, len(evs), e.Ts)
		}
	}
	return nil
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
