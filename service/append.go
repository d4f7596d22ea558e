package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/loader"
)

// AppendEvent appends ev to the session and applies its state delta, in one
// atomic Redis script (one round trip; a second one applies an app: delta,
// which lives in its own hash slot).
//
// A Partial event is returned untouched and stored nowhere. Otherwise ev
// gets an ID and timestamp when it has none; its temp: keys are applied to
// sess and to the invocation's temp state, and removed from
// ev.Actions.StateDelta; sess is updated in place (events, state,
// LastUpdateTime). A handle older than the stored session, or read before
// the session was deleted and created again, is ErrStaleSession with
// nothing written, unless Config.ConcurrentAppends (which still refuses
// the handle of a deleted incarnation).
//
// Event ids are unique within a session: appending an event whose id the
// session holds writes nothing; when it is the same event (a retry after a
// timeout; the timestamp may differ) AppendEvent succeeds and gives ev the
// stored timestamp, otherwise it is ErrAlreadyExists.
//
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
	p, err := s.planAppend(sess.ref, ev)
	if err != nil {
		return err
	}
	sess.mu.RLock()
	p.args.HandleRev, p.args.Incarnation, p.args.HandleLastTs = sess.rev, sess.inc, sess.lastTs
	sess.mu.RUnlock()
	p.args.Keys = sess.cacheKeys(s.cache)
	p.args.Concurrent = s.cfg.ConcurrentAppends
	res, err := s.runAppend(ctx, p, sess, ev)
	if err != nil || res == nil {
		return err
	}
	return sess.applyAppended(ev, res, p.normalized)
}

// AppendToRequest names a session and an event to append to it without a
// handle.
type AppendToRequest struct {
	AppName, UserID, SessionID string
	Event                      *Event
	// IfLastUpdate, when not zero, appends only while the session's
	// LastUpdateTime is exactly this (optimistic concurrency, as HTTP's
	// If-Match); otherwise ErrStaleSession with nothing written. Zero: the
	// event is appended to the session as it is now. A time no session's
	// update time can be (before 1970, from 2^53 µs on) is
	// ErrInvalidArgument.
	IfLastUpdate time.Time
}

// AppendTo appends req.Event to a session as it is now, without a handle:
// one script call, as AppendEvent makes, for callers that hold no Session
// (an HTTP API, a queue consumer). req.Event is updated in place (id,
// timestamp, temp: keys removed) as AppendEvent does; event ids, retries and
// app: deltas behave as with AppendEvent.
func (s *Service) AppendTo(ctx context.Context, req *AppendToRequest) error {
	if req == nil || req.Event == nil {
		return fmt.Errorf("%w: append request or its event: nil", ErrInvalidArgument)
	}
	if req.Event.Partial {
		return nil
	}
	if err := checkIfLastUpdate(req.IfLastUpdate); err != nil {
		return err
	}
	p, err := s.planAppend(base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID}, req.Event)
	if err != nil {
		return err
	}
	p.args.NoHandle = true
	if !req.IfLastUpdate.IsZero() {
		p.args.IfUpdateTime = req.IfLastUpdate.UnixMicro()
	}
	_, err = s.runAppend(ctx, p, nil, req.Event)
	return err
}

// appendPlan is an append checked and ready to send.
type appendPlan struct {
	stored     *Event // the event as it will be stored (id and time filled in, temp: keys removed)
	args       cache.AppendArgs
	normalized map[string]any // the delta's values as a Get decodes them
}

// planAppend checks an event appended to (app, user, sid) (prepareEvent)
// and prepares the script's arguments; ev is not changed.
func (s *Service) planAppend(ref base.SessionRef, ev *Event) (*appendPlan, error) {
	if err := checkSession(ref.App, ref.User, ref.ID); err != nil {
		return nil, err
	}
	p, err := s.prepareEvent(ev)
	if err != nil {
		return nil, err
	}
	stored := p.stored
	pre, post, err := cache.SplitTimestamp(p.blob)
	if err != nil {
		return nil, fmt.Errorf("append event %s to %s: %w", stored.ID, ref.String(), err)
	}
	return &appendPlan{stored: stored, normalized: p.normalized, args: cache.AppendArgs{
		SessionRef: ref,
		Ts:         stored.Timestamp.UnixMicro(), InvocationID: stored.InvocationID, EventID: stored.ID,
		CheckID:  ev.ID != "",
		EventPre: pre, EventPost: post, Delta: p.delta, Artifacts: sessionArtifacts(stored.Actions.ArtifactDelta),
		Index: compactionIndexEntry(stored),
	}}, nil
}

// runAppend sends a planned append and its app: step. On success ev becomes
// the stored event; the result is nil when the session held the event
// already (a retry, answered by appendedBefore, which brings sess, when not
// nil, up to date).
func (s *Service) runAppend(ctx context.Context, p *appendPlan, sess *Session, ev *Event) (*cache.AppendResult, error) {
	a := p.args
	if err := s.takeAppOrder(ctx, a.App, &a.Delta); err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return nil, err // a state cap: the error names the app
		}
		return nil, fmt.Errorf("append event %s to %s: app state: %w", a.EventID, a.String(), err)
	}
	res, err := s.appendScript(ctx, a)
	var dup *cache.DuplicateEventError
	switch {
	case errors.As(err, &dup):
		if err := s.appendedBefore(ctx, a, sess, ev, p.stored, dup.Stored, p.normalized); err != nil {
			return nil, err
		}
		// A retry: the first attempt may have stored the event and failed
		// before its app: step was done. The step is idempotent per event.
		// In the database already, the flusher did the step when it wrote
		// the event (it applies the app delta of every entry it writes),
		// unless it had to skip it (Redis lost the order numbers): then the
		// retry does it, and only then. Doing it again otherwise could put
		// back older values: the ids of the deltas applied do not outlive
		// the cache (a FLUSHALL, a restart without AOF).
		inc := dup.Incarnation
		if inc == 0 {
			inc = a.Incarnation // looked up in the database
		}
		flushed := dup.Stored == nil || dup.Flushed
		if !flushed && len(a.Delta.App) > 0 {
			// Redis may hold an older copy of the session, whose flushed
			// mark is behind what the database holds, and the ids of the
			// changes applied may be gone with Redis: an event the database
			// holds was flushed, its change applied then (none is without
			// a database).
			var err error
			if flushed, err = s.loader.HoldsEvent(ctx, a.SessionRef, a.EventID); err != nil {
				return nil, fmt.Errorf("append event %s to %s: app state: %w", a.EventID, a.String(), err)
			}
		}
		if err := s.finishApp(ctx, &a, inc, flushed); err != nil {
			return nil, fmt.Errorf("append event %s to %s: app state: %w", a.EventID, a.String(), err)
		}
		if flushed && len(a.Delta.App) > 0 && s.loader.Durable() {
			// No change-log entry carries a step done now: the app's state
			// goes to the database here (a retry again, if this fails, finds
			// the step done and writes it again).
			if err := loader.WriteAppState(ctx, s.db, s.cache, a.App); err != nil {
				return nil, fmt.Errorf("append event %s to %s: %w", a.EventID, a.String(), err)
			}
		}
		return nil, nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidArgument):
		return nil, err
	case errors.Is(err, cache.ErrNotCached), errors.Is(err, cache.ErrDeleted):
		return nil, sessionError(ErrNotFound, a.App, a.User, a.ID)
	case errors.Is(err, ErrStaleSession):
		return nil, sessionError(ErrStaleSession, a.App, a.User, a.ID)
	case err != nil:
		return nil, fmt.Errorf("append event %s to %s: %w", a.EventID, a.String(), err)
	}
	if err := s.finishApp(ctx, &a, res.Incarnation, false); err != nil {
		return nil, fmt.Errorf("append event %s to %s: app state: %w", a.EventID, a.String(), err)
	}
	p.stored.Timestamp = time.UnixMicro(res.Ts).UTC()
	*ev = *p.stored
	return res, nil
}

// appendScript runs append.lua for args through the loader, which puts
// back from the database what Redis lost (evicted, expired, flushed) and
// appends again; an event id Redis cannot vouch for is looked up in the
// database first (checkEventID).
func (s *Service) appendScript(ctx context.Context, args cache.AppendArgs) (*cache.AppendResult, error) {
	var res *cache.AppendResult
	err := s.loader.Run(ctx, args.SessionRef, func() (err error) {
		res, err = s.cache.Append(ctx, args)
		if errors.Is(err, cache.ErrCheckEventID) {
			if err = s.checkEventID(ctx, args); err == nil {
				args.CheckID = false
				res, err = s.cache.Append(ctx, args)
			}
		}
		return err
	})
	return res, err
}

// checkEventID looks up in the database an event id append.lua could not
// vouch for (ids older than the cache): nil when the session has no such
// event, a *cache.DuplicateEventError with the stored event when it has.
func (s *Service) checkEventID(ctx context.Context, args cache.AppendArgs) error {
	rec, err := s.loader.StoredEvent(ctx, args.SessionRef, args.EventID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return &cache.DuplicateEventError{Stored: rec, Flushed: true}
}

// appendedBefore answers an append whose event id the session holds: the
// stored event (nil: not cached, and not in the database either — it was
// looked up there) is compared with the one sent.
func (s *Service) appendedBefore(ctx context.Context, a cache.AppendArgs, sess *Session, ev, sent *Event, rec *cache.EventRecord, normalized map[string]any) error {
	if rec == nil && !s.loader.Durable() {
		return fmt.Errorf("append event %s to %s: the stored event with this id is not cached", sent.ID, a.String())
	}
	if rec == nil {
		var err error
		if rec, err = s.loader.StoredEvent(ctx, a.SessionRef, sent.ID); err != nil {
			return fmt.Errorf("append event %s to %s: look up the stored event: %w", sent.ID, a.String(), err)
		}
	}
	same, err := isRetryOf(rec.JSON, sent)
	if err != nil {
		return fmt.Errorf("append event %s to %s: %w", sent.ID, a.String(), err)
	}
	if !same {
		return fmt.Errorf("%w: event %s: %s holds another event with this id", ErrAlreadyExists, sent.ID, a.String())
	}
	sent.Timestamp = time.UnixMicro(rec.Ts).UTC()
	*ev = *sent
	if sess == nil {
		return nil
	}
	sess.mu.RLock()
	rev, lastTs := sess.rev, sess.lastTs
	sess.mu.RUnlock()
	seq, snap := rec.Seq, (*cache.Snapshot)(nil)
	if seq == 0 && rec.Ts > lastTs {
		// Answered from the database (older than the cached events), its seq
		// unknown, and not seen by the handle (timestamps increase with seqs):
		// what the handle has not seen holds the event, with its seq.
		if snap, err = s.readMissed(ctx, sess, ev, lastTs); err != nil {
			return err
		}
		if seq, err = seqOf(snap.Events, rec.Ts, sent.ID); err != nil {
			return fmt.Errorf("append event %s to %s: %w", sent.ID, a.String(), err)
		}
	}
	switch {
	case seq > 0 && rev == seq-1:
		// The handle missed only this event (the reply to the first attempt was lost).
		return sess.applyAppended(ev, &cache.AppendResult{Seq: seq, Ts: rec.Ts}, normalized)
	case seq > 0 && rev < seq-1 && s.cfg.ConcurrentAppends:
		// The first attempt, whose reply was lost, brought the handle up to
		// date with what it had missed: do it now.
		return s.catchUp(ctx, sess, ev, lastTs, snap, normalized)
	}
	// The handle has the event already, or is further behind (stale).
	return nil
}

// seqOf is the seq of the event with id stored at ts among evs, 0 when
// none is. The time alone does not name it: an older copy of the session
// that Redis came back with may hold another event at the database's time
// of this one (each stamped the previous event's time + 1 µs), and a
// handle must not be brought along by an event Redis does not hold.
func seqOf(evs []cache.EventRecord, ts int64, id string) (int64, error) {
	for _, r := range evs {
		if r.Ts != ts {
			continue
		}
		var e Event
		if err := unmarshalEvent([]byte(r.JSON), &e, nil); err != nil {
			return 0, fmt.Errorf("stored event %d: %w", r.Seq, err)
		}
		if e.ID == id {
			return r.Seq, nil
		}
	}
	return 0, nil
}

// readMissed reads the session's events after lastTs (the handle's last
// event; all of them when it has none) and its state, cache first.
func (s *Service) readMissed(ctx context.Context, sess *Session, ev *Event, lastTs int64) (*cache.Snapshot, error) {
	after := int64(-1)
	if lastTs > 0 {
		after = lastTs + 1
	}
	snap, err := s.loader.Get(ctx, cache.GetArgs{SessionRef: sess.ref, After: after})
	if err != nil {
		return nil, fmt.Errorf("append event %s to %s: bring the handle up to date: %w", ev.ID, sess.ref.String(), err)
	}
	return snap, nil
}

// catchUp brings a handle up to date with the stored session, as the
// answer to a concurrent append does, for an event the session stored
// already: the events after the handle's last one, and the state (snap,
// when readMissed has read them already). Of the event's own keys only the
// app: and temp: ones are news (the session and user state read may be
// newer than the event).
func (s *Service) catchUp(ctx context.Context, sess *Session, ev *Event, lastTs int64, snap *cache.Snapshot, normalized map[string]any) error {
	if snap == nil {
		var err error
		if snap, err = s.readMissed(ctx, sess, ev, lastTs); err != nil {
			return err
		}
	}
	news := map[string]any{}
	for k, v := range normalized {
		if strings.HasPrefix(k, AppPrefix) || strings.HasPrefix(k, TempPrefix) {
			news[k] = v
		}
	}
	if err := sess.applyAppended(ev, &cache.AppendResult{Seq: snap.Rev, Ts: snap.UpdateTime, CaughtUp: snap}, news); err != nil {
		return err
	}
	sess.mu.Lock()
	sess.lastUpdate = time.UnixMicro(snap.UpdateTime).UTC()
	sess.mu.Unlock()
	return nil
}

// isRetryOf tells whether the stored JSON of an event (API form) is the
// event sent, but for its timestamp (a retry may carry a new one). Both are
// compared as values in storage form: an event read back from the database
// has its object keys in the database's order and its bytes in the alphabet
// stored there (docs/persistence.md), and is the same event all the same.
func isRetryOf(storedJSON string, sent *Event) (bool, error) {
	var stored Event
	if err := unmarshalEvent([]byte(storedJSON), &stored, nil); err != nil {
		return false, fmt.Errorf("stored event: %w", err)
	}
	var again Event
	b, err := json.Marshal(sent)
	if err == nil {
		err = again.UnmarshalJSON(b)
	}
	if err != nil {
		return false, err
	}
	stored.Timestamp, again.Timestamp = time.Time{}, time.Time{}
	x, err := storageValue(&stored)
	if err != nil {
		return false, fmt.Errorf("stored event: %w", err)
	}
	y, err := storageValue(&again)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(x, y), nil
}

// storageValue is an event in storage form, decoded (numbers exact).
func storageValue(e *Event) (any, error) {
	api, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	st, err := eventjson.StorageForm(api)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(st))
	dec.UseNumber()
	var v any
	err = dec.Decode(&v)
	return v, err
}

// takeAppOrder takes the order number of d's app: part (the first step of
// a write with app: keys; nothing to do without), putting the app state
// back from the database first when Redis lost it. A write that would grow
// the app's state past Config.MaxAppStateBytes is refused here, before the
// session's step stores anything (a *base.StateCapError).
func (s *Service) takeAppOrder(ctx context.Context, app string, d *cache.StateDelta) error {
	if len(d.App) == 0 {
		return nil
	}
	n, err := s.loader.AppOrder(ctx, app, d.App)
	d.AppOrder = n
	return err
}

// applyApp applies c, the app: part of a write (its last step), putting the app state back from the database first when Redis lost
// it. It is retried with capped backoff until it succeeds or ctx ends: the
// session's part is stored already, and giving up would invite a caller
// retry that stores the event twice; the step is idempotent per change id.
// When Redis lost the app's order numbers since d's was taken, the change
// takes a new one (the call is still running: it may take effect now).
func (s *Service) applyApp(ctx context.Context, app string, c cache.AppChange) error {
	if len(c.Pairs) == 0 {
		return nil
	}
	return untilDone(ctx, func() error {
		err := s.loader.ApplyApp(ctx, app, c)
		if errors.Is(err, cache.ErrAppOrderLost) {
			// The session's part is stored: no cap check (nil pairs).
			if c.Order, err = s.loader.AppOrder(ctx, app, nil); err == nil {
				err = s.loader.ApplyApp(ctx, app, c)
			}
		}
		return err
	})
}

// finishApp applies the app part of the delta of a, an event whose session
// part is already stored in the incarnation given; ifSkipped: the event is
// in the database, and the change applies only if the flusher skipped it
// (cache.AppChange.IfSkipped).
func (s *Service) finishApp(ctx context.Context, a *cache.AppendArgs, incarnation int64, ifSkipped bool) error {
	if len(a.Delta.App) == 0 {
		return nil
	}
	return s.applyApp(ctx, a.App, cache.AppChange{ID: cache.AppendChangeID(incarnation, a.User, a.ID, a.EventID),
		Order: a.Delta.AppOrder, Pairs: a.Delta.App, IfSkipped: ifSkipped})
}

// untilDone runs f until it succeeds or ctx ends, with capped backoff: for
// the rest of a call whose write is stored already.
func untilDone(ctx context.Context, f func() error) error {
	backoff := 10 * time.Millisecond
	for {
		err := f()
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
		if n := len(have); n == 0 || have[n-1].Timestamp.Before(e.Timestamp) {
			have = append(have, e) // the common case: the handle's own append, newest of all
			continue
		}
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
	if _, err := s.cache.EndInvocation(ctx, sess.ref, invocationID); err != nil {
		return fmt.Errorf("end invocation %s of %s: %w", invocationID, sess.ref.String(), err)
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
