package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/loader"
	"github.com/adksession/adksession/persist"
)

// AppendEvent appends ev to the session and applies its state delta, in one
// atomic Redis script (one round trip; a second one applies an app: delta,
// which lives in its own hash slot).
//
// A Partial event is returned untouched and stored nowhere. Otherwise ev
// gets an ID and timestamp when it has none; its temp: keys are applied to
// sess and to the invocation's temp state, and removed from
// ev.Actions.StateDelta; sess is updated in place (events, state,
// LastUpdateTime). A handle older than the stored session is
// ErrStaleSession with nothing written, unless Config.ConcurrentAppends.
// Once the first script has stored the event, a failing app: step is
// retried (it is idempotent) until it succeeds or ctx ends.
func (s *Service) AppendEvent(ctx context.Context, sess *Session, ev *Event) error {
	if sess == nil {
		return fmt.Errorf("%w: session: nil", ErrInvalidArgument)
	}
	if ev == nil {
		return fmt.Errorf("%w: event: nil", ErrInvalidArgument)
	}
	if ev.Partial {
		return nil
	}
	if err := checkSession(sess.appName, sess.userID, sess.id); err != nil {
		return err
	}
	p, err := s.prepareEvent(ev)
	if err != nil {
		return err
	}
	stored, blob, delta, normalized := p.stored, p.blob, p.delta, p.normalized

	sess.mu.RLock()
	args := cache.AppendArgs{
		App: sess.appName, User: sess.userID, SID: sess.id,
		HandleRev: sess.rev, Concurrent: s.cfg.ConcurrentAppends, HandleLastTs: sess.lastTs,
		Ts: stored.Timestamp.UnixMicro(), InvocationID: stored.InvocationID, EventID: stored.ID,
		Event: string(blob), Delta: delta, Artifacts: sessionArtifacts(stored.Actions.ArtifactDelta),
	}
	sess.mu.RUnlock()
	res, err := s.cache.Append(ctx, args)
	for attempt := 0; attempt < 2 && s.loader.Durable() && isRecoverable(err); attempt++ {
		// Redis lost what the script needs (evicted, expired, flushed):
		// put it back from the database, then append again.
		if err = s.loader.Recover(ctx, sess.appName, sess.userID, sess.id, err); err == nil {
			res, err = s.cache.Append(ctx, args)
		}
	}
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return fmt.Errorf("%w: session %s of app %s, user %s", ErrNotFound, sess.id, sess.appName, sess.userID)
	case errors.Is(err, cache.ErrStale):
		return fmt.Errorf("%w: session %s: %v", ErrStaleSession, sess.id, err)
	case errors.Is(err, cache.ErrNotCached), errors.Is(err, cache.ErrDeleted):
		return fmt.Errorf("%w: session %s of app %s, user %s", ErrNotFound, sess.id, sess.appName, sess.userID)
	case err != nil:
		return fmt.Errorf("append event %s to session %s: %w", stored.ID, sess.id, err)
	}
	if err := s.finishApp(ctx, sess.appName, stored.ID, delta.App); err != nil {
		return fmt.Errorf("append event %s to session %s: app state: %w", stored.ID, sess.id, err)
	}

	stored.Timestamp = time.UnixMicro(res.Ts).UTC()
	*ev = *stored
	return sess.applyAppended(ev, res, normalized)
}

// isRecoverable tells whether a script failed for want of data Redis lost.
func isRecoverable(err error) bool {
	return errors.Is(err, cache.ErrNotCached) || errors.Is(err, cache.ErrIncomplete) ||
		errors.Is(err, cache.ErrUserNotCached) || errors.Is(err, cache.ErrAppNotCached)
}

// applyApp applies the app: part of a delta (second step), putting the app
// state back from the database first when Redis lost it.
func (s *Service) applyApp(ctx context.Context, app, id string, pairs []cache.Pair) error {
	if s.db == nil {
		return s.cache.ApplyApp(ctx, app, id, pairs)
	}
	return persist.ApplyAppState(ctx, s.db, s.cache, app, id, pairs)
}

// finishApp applies the app part of an event whose session part is already
// stored. Giving up would leave a stored event without its app: keys (only
// a database's flusher repairs them) and invite a caller retry that stores
// the event twice; the app script is idempotent per event id, so it is
// retried with capped backoff until it succeeds or ctx ends.
func (s *Service) finishApp(ctx context.Context, app, id string, pairs []cache.Pair) error {
	backoff := 10 * time.Millisecond
	for {
		err := s.applyApp(ctx, app, id, pairs)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// applyAppended brings the handle up to date with an acknowledged append.
func (sess *Session) applyAppended(ev *Event, res *cache.AppendResult, normalized map[string]any) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	// newer: no later append through this handle has been applied to it yet.
	// Otherwise the handle already holds a later state than this result's,
	// which must not replace it.
	newer := res.Seq > sess.rev
	if res.CaughtUp != nil {
		// The handle was behind: add the events it missed and, unless it
		// already holds a later state, take the stored session and user
		// state, keeping the app state it had.
		missed, err := decodeEvents(res.CaughtUp.Events)
		if err != nil {
			return err
		}
		sess.events = mergeEvents(sess.events, missed)
		if newer {
			fresh, err := mergedState(res.CaughtUp)
			if err != nil {
				return err
			}
			for k, v := range sess.state {
				if strings.HasPrefix(k, AppPrefix) || strings.HasPrefix(k, TempPrefix) {
					fresh[k] = v
				}
			}
			sess.state = fresh
		}
	}
	if newer {
		if ev.InvocationID != sess.tempInv {
			for k := range sess.state {
				if strings.HasPrefix(k, TempPrefix) {
					delete(sess.state, k)
				}
			}
			sess.tempInv = ev.InvocationID
		}
		for k, v := range normalized {
			sess.state[k] = v
		}
		sess.rev, sess.lastTs = res.Seq, res.Ts
		sess.lastUpdate = ev.Timestamp
	} else {
		// A later append through this handle landed first: only app keys,
		// and temp keys of the invocation the handle holds, are news.
		for k, v := range normalized {
			if strings.HasPrefix(k, AppPrefix) || strings.HasPrefix(k, TempPrefix) && ev.InvocationID == sess.tempInv {
				sess.state[k] = v
			}
		}
	}
	sess.events = mergeEvents(sess.events, []*Event{ev})
	return nil
}

// mergeEvents adds events to a handle's list in timestamp (= append) order,
// once each.
func mergeEvents(have, add []*Event) []*Event {
	for _, e := range add {
		i, found := slices.BinarySearchFunc(have, e, func(a, b *Event) int { return a.Timestamp.Compare(b.Timestamp) })
		if found && have[i].ID == e.ID {
			continue
		}
		have = slices.Insert(have, i, e)
	}
	return have
}

// EndInvocation drops the temp: state of invocationID (in Redis and in
// sess); later Gets with that InvocationID no longer see it.
func (s *Service) EndInvocation(ctx context.Context, sess *Session, invocationID string) error {
	if sess == nil {
		return fmt.Errorf("%w: session: nil", ErrInvalidArgument)
	}
	if err := checkID("invocationID", invocationID, MaxInvocationIDBytes); err != nil {
		return err
	}
	if _, err := s.cache.EndInvocation(ctx, sess.appName, sess.userID, sess.id, invocationID); err != nil {
		return fmt.Errorf("end invocation %s of session %s: %w", invocationID, sess.id, err)
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.tempInv == invocationID {
		for k := range sess.state {
			if strings.HasPrefix(k, TempPrefix) {
				delete(sess.state, k)
			}
		}
		sess.tempInv = ""
	}
	return nil
}
