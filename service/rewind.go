package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// RewindRequest names a session and the invocation to rewind before.
type RewindRequest struct {
	AppName, UserID, SessionID string
	// BeforeInvocationID: the session goes back to the point just before
	// the first event of this invocation.
	BeforeInvocationID string
}

// rewindAttempts bounds how often a rewind computed from the full history
// is retried when appends keep landing between the read and the write.
const rewindAttempts = 5

// deltasMarker is where the rewind event's JSON gets its deltas.
var deltasMarker = []byte(`"stateDelta":{},"artifactDelta":{}`)

// Rewind restores the session-scoped state and the artifact versions of
// the point just before the first event of invocation BeforeInvocationID,
// by appending one rewind event (author "user", invocation id "e-<uuid>",
// Actions.RewindBeforeInvocationID set, a StateDelta that sets changed keys
// back and keys that did not exist then to null, an ArtifactDelta naming the
// version each changed file had then, -1 for files that did not exist). It
// returns that event.
//
// Unlike ADK's Runner.rewind_async it is atomic (one Redis script: no
// reader sees half a rewind, and a concurrent append lands wholly before or
// after it), it keeps the session's create-time state, and its cost grows
// with the number of events undone, not with the history length. App and
// user state are not rewound. Rewound events stay stored; VisibleEvents
// hides them. An unknown session or invocation is ErrNotFound. Handles of
// the session obtained before the rewind are stale afterwards.
//
// When the point is older than what Redis keeps undo records for (events
// trimmed from the cache, or a session read back from the database), the
// deltas are computed from the full history instead, as ADK does.
func (s *Service) Rewind(ctx context.Context, req *RewindRequest) (*Event, error) {
	if req == nil {
		return nil, nilArgument("rewind request")
	}
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return nil, err
	}
	if err := checkID("BeforeInvocationID", req.BeforeInvocationID, MaxInvocationIDBytes); err != nil {
		return nil, err
	}
	ev := &Event{
		ID:           uuid.NewString(),
		InvocationID: "e-" + uuid.NewString(),
		Author:       "user",
		Timestamp:    time.Now().Truncate(time.Microsecond).UTC(),
		Actions:      EventActions{RewindBeforeInvocationID: req.BeforeInvocationID},
	}
	blob, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("rewind %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	head, tail, ok := bytes.Cut(blob, deltasMarker)
	if !ok {
		return nil, fmt.Errorf("rewind %s: event JSON has no empty deltas: %s", base.SessionName(req.AppName, req.UserID, req.SessionID), blob)
	}
	pre, mid, err := cache.SplitTimestamp(head)
	if err != nil {
		return nil, fmt.Errorf("rewind %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	args := cache.RewindArgs{
		SessionRef: base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID},
		Before:     req.BeforeInvocationID, InvocationID: ev.InvocationID, EventID: ev.ID, Ts: ev.Timestamp.UnixMicro(),
		EventPre: pre, EventMid: mid + `"stateDelta":`, EventTail: string(tail),
	}
	createState := ""
	for attempt := 1; ; attempt++ {
		// The loader brings the session back from the database when Redis
		// lost it (or says it does not exist) and runs the script again.
		var res *cache.RewindResult
		err := s.loader.Run(ctx, base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID}, func() (err error) {
			res, err = s.cache.Rewind(ctx, args)
			return err
		})
		var cold *cache.UndoIncompleteError
		switch {
		case err == nil:
			return rewindEvent(res)
		case errors.Is(err, cache.ErrInvocationNotFound):
			return nil, unknownInvocation(req.AppName, req.UserID, req.SessionID, req.BeforeInvocationID)
		case errors.Is(err, ErrNotFound):
			return nil, err
		case errors.As(err, &cold):
			createState = cold.CreateState
			if args.Computed, err = s.rewindFromHistory(ctx, req, createState); err != nil {
				return nil, err
			}
		case args.Computed != nil && errors.Is(err, base.ErrStaleSession) && attempt < rewindAttempts:
			// An append landed between the history read and the write.
			if args.Computed, err = s.rewindFromHistory(ctx, req, createState); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("rewind %s before invocation %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), req.BeforeInvocationID, err)
		}
	}
}

// rewindEvent decodes the appended rewind event; the cache's timestamp is
// authoritative.
func rewindEvent(res *cache.RewindResult) (*Event, error) {
	ev := &Event{}
	if err := json.Unmarshal([]byte(res.Event), ev); err != nil {
		return nil, fmt.Errorf("rewind event %d: %w", res.Seq, err)
	}
	ev.Timestamp = time.UnixMicro(res.Ts).UTC()
	return ev, nil
}

// unknownInvocation is the error of an invocation inv that session (app,
// user, sid) has no event of.
func unknownInvocation(app, user, sid, inv string) error {
	return fmt.Errorf("%w: invocation %s in %s", ErrNotFound, inv, base.SessionName(app, user, sid))
}

// fullHistory is the cold path's source (of a rewind, of a fork): every
// event of the session (sequence numbers 1..Rev) and its current state. It
// reads through the loader, which serves the events older than Redis's
// cached tail from the database; until the loader does, a history that
// does not start at the first event is refused rather than replayed from
// the middle.
func (s *Service) fullHistory(ctx context.Context, ref base.SessionRef) (*cache.Snapshot, error) {
	snap, err := s.loader.Get(ctx, cache.GetArgs{SessionRef: ref, After: -1})
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%s: read history: %w", ref.String(), err)
	}
	for i, r := range snap.Events {
		if r.Seq != int64(i+1) {
			return nil, fmt.Errorf("%s: history read has event %d where %d belongs: the events older than the cached ones are not available", ref.String(), r.Seq, i+1)
		}
	}
	if int64(len(snap.Events)) != snap.Rev {
		return nil, fmt.Errorf("%s: history read has %d events, the session %d", ref.String(), len(snap.Events), snap.Rev)
	}
	return snap, nil
}

// historyError is an error of fullHistory or createState for operation op
// ("rewind session s1: read history: ..."); ErrNotFound comes back as it is.
func historyError(op string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("%s %w", op, err)
}

// stateBefore is the session-scoped state just before events[p], by ADK's
// rule but from the create-time state instead of an empty one: createTime
// with the session keys of the deltas of events[:p] applied in order.
func stateBefore(createTime map[string]json.RawMessage, events []*Event, p int) (map[string]any, error) {
	then := map[string]any{}
	for k, v := range createTime {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return nil, fmt.Errorf("create-time state %q: %w", k, err)
		}
		then[k] = x
	}
	for _, e := range events[:p] {
		for k, v := range e.Actions.StateDelta {
			if isSessionKey(k) {
				then[k] = v
			}
		}
	}
	return then, nil
}

// rewindFromHistory computes a rewind's deltas as ADK does, by replaying
// the events before the point, but from the create-time state instead of an
// empty one.
func (s *Service) rewindFromHistory(ctx context.Context, req *RewindRequest, createState string) (*cache.RewindDelta, error) {
	snap, err := s.fullHistory(ctx, base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID})
	if err != nil {
		return nil, historyError("rewind", err)
	}
	events, err := decodeEvents(snap.Events)
	if err != nil {
		return nil, fmt.Errorf("rewind %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	p := slices.IndexFunc(events, func(e *Event) bool { return e.InvocationID == req.BeforeInvocationID })
	if p < 0 {
		return nil, unknownInvocation(req.AppName, req.UserID, req.SessionID, req.BeforeInvocationID)
	}
	createTime, err := s.createState(ctx, req.AppName, req.UserID, req.SessionID, createState, snap.Incarnation)
	if err != nil {
		return nil, historyError("rewind", err)
	}
	then, err := stateBefore(createTime, events, p)
	if err != nil {
		return nil, fmt.Errorf("rewind %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	thenFiles, nowFiles := map[string]int64{}, map[string]int64{}
	for i, e := range events {
		for f, v := range e.Actions.ArtifactDelta {
			if i < p {
				thenFiles[f] = v
			}
			nowFiles[f] = v
		}
	}
	now := map[string]any{}
	for k, v := range snap.State {
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return nil, fmt.Errorf("rewind %s: state %q: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), k, err)
		}
		now[k] = x
	}
	d := &cache.RewindDelta{Rev: snap.Rev}
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(then, now))) {
		was, wasSet := then[k]
		cur, curSet := now[k]
		switch {
		case !wasSet || was == nil:
			if curSet && cur != nil {
				d.State = append(d.State, cache.Pair{Key: k, Value: "null"})
			}
		case !curSet || !reflect.DeepEqual(was, cur):
			b, err := json.Marshal(was)
			if err != nil {
				return nil, fmt.Errorf("rewind %s: state %q: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), k, err)
			}
			d.State = append(d.State, cache.Pair{Key: k, Value: string(b)})
		}
	}
	for _, f := range slices.Sorted(maps.Keys(nowFiles)) {
		if strings.HasPrefix(f, UserPrefix) {
			continue
		}
		was, ok := thenFiles[f]
		if !ok || was < 0 {
			was = -1
		}
		cur := nowFiles[f]
		if cur < 0 {
			cur = -1
		}
		if was != cur {
			d.Artifacts = append(d.Artifacts, cache.Pair{Key: f, Value: strconv.FormatInt(was, 10)})
		}
	}
	return d, nil
}

// createState is the session-scoped state the session was created with:
// Redis's copy (fromCache, "" when Redis lost it), else the database's
// (recorded by the flusher), else none, as ADK (a session ADK wrote).
func (s *Service) createState(ctx context.Context, app, user, sid, fromCache string, incarnation int64) (map[string]json.RawMessage, error) {
	createTime := map[string]json.RawMessage{}
	if fromCache != "" {
		if err := json.Unmarshal([]byte(fromCache), &createTime); err != nil {
			return nil, fmt.Errorf("%s: create-time state: %w", base.SessionName(app, user, sid), err)
		}
		return createTime, nil
	}
	stored, ok, err := s.loader.CreateState(ctx, base.SessionRef{App: app, User: user, ID: sid}, incarnation)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base.SessionName(app, user, sid), err)
	}
	if ok {
		createTime = stored
	}
	return createTime, nil
}

// isSessionKey tells whether a state key is session-scoped (no app:,
// user: or temp: prefix).
func isSessionKey(k string) bool {
	return !strings.HasPrefix(k, AppPrefix) && !strings.HasPrefix(k, UserPrefix) && !strings.HasPrefix(k, TempPrefix)
}

func mergeKeys(a, b map[string]any) map[string]bool {
	m := make(map[string]bool, len(a)+len(b))
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// sessionArtifacts are the artifact versions of an event that a rewind
// restores: all but user-scoped ("user:") files, as ADK.
func sessionArtifacts(delta map[string]int64) []cache.Pair {
	var out []cache.Pair
	for _, f := range sortedKeys(delta) {
		if !strings.HasPrefix(f, UserPrefix) {
			out = append(out, cache.Pair{Key: f, Value: strconv.FormatInt(delta[f], 10)})
		}
	}
	return out
}
