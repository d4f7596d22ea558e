package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
)

// GetRequest asks for a session and a window of its events, or its
// compacted view.
type GetRequest struct {
	AppName, UserID, SessionID string
	// NumRecentEvents > 0 keeps the newest n events (of those After lets
	// through). Negative is ErrInvalidArgument; beyond 2^53 (more events
	// than a session can count) it keeps them all.
	NumRecentEvents int
	// After keeps events with timestamp >= After (inclusive); zero = all.
	// A bound before 1970 keeps all, one after 2200 none (event timestamps
	// lie between).
	After time.Time
	// InvocationID includes the temp: state of that running invocation.
	InvocationID string
	// Compacted returns the compacted view of the events, CompactedView of
	// the whole history: what ADK's context building needs to give the model
	// the same input as the whole history (docs/design.md, "The compacted
	// view"). With NumRecentEvents or After it is ErrInvalidArgument. It
	// reads a superset of the view from the compaction index Redis keeps
	// (O(log n + k) for the k events of that superset; the part older than
	// the cached tail by time from the database) and selects the view in
	// Go. Of a session Redis holds without the index and only in part (read
	// back from the database) the older part is read through the
	// database's indexes (O(log n + k) again, plus the cached tail); one
	// Redis holds whole without it (a fork) is read whole, O(n) for n
	// events, and that read builds the index for the next ones.
	Compacted bool
}

// GetResponse holds the session.
type GetResponse struct{ Session *Session }

// Get returns a session with a window of its events (or their compacted
// view) and its full current state. An unknown session, or one of another
// user or app, is ErrNotFound. The handle appends on top of the stored
// history whatever the window: the events it shows are never taken for it.
func (s *Service) Get(ctx context.Context, req *GetRequest) (*GetResponse, error) {
	if req == nil {
		return nil, nilArgument("get request")
	}
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return nil, err
	}
	if req.InvocationID != "" {
		if err := checkID("InvocationID", req.InvocationID, MaxInvocationIDBytes); err != nil {
			return nil, err
		}
	}
	numRecent, err := windowSize(req.NumRecentEvents)
	if err != nil {
		return nil, err
	}
	if err := checkCompacted(req); err != nil {
		return nil, err
	}
	after := int64(-1)
	if !req.After.IsZero() {
		after = windowBound(req.After)
	}
	args := cache.GetArgs{
		SessionRef: base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID},
		After:      after, NumRecent: numRecent, InvocationID: req.InvocationID, Compacted: req.Compacted,
	}
	snap, err := s.loader.Get(ctx, args)
	if err == nil && snap.Indexed {
		// The view's events the database holds; without the index after all
		// (it went away meanwhile), the view of the whole history.
		if err = s.loader.CompactedOlder(ctx, args, snap, answeredIDs); errors.Is(err, cache.ErrIncomplete) {
			args.Compacted = false
			snap, err = s.loader.Get(ctx, args)
		}
	}
	var decoded []*Event
	if err == nil && args.Compacted && !snap.Indexed && s.loader.ViewIndexed() {
		// Without the index, the older part from the database's indexes
		// (args.Compacted: not after the fallback above, which read it all).
		if decoded, err = s.viewFromDatabase(ctx, args, snap); err == nil && decoded != nil {
			s.buildIndexLater(args) // the walk built no index: the next reads are the index's
		}
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("get %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	var kept []*Event
	if req.Compacted {
		if snap.Events, kept, err = s.compactedRecords(ctx, args, snap, decoded); err != nil {
			return nil, fmt.Errorf("get %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
		}
	}
	sess, err := sessionFromEvents(args.SessionRef, snap, kept)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	if len(snap.Temp) > 0 {
		sess.tempInv = req.InvocationID
	}
	return &GetResponse{Session: sess}, nil
}

// checkCompacted refuses Compacted with a window: the view is of the whole
// history, and a view of a window is no view of it.
func checkCompacted(req *GetRequest) error {
	if !req.Compacted {
		return nil
	}
	var with []string
	if req.NumRecentEvents != 0 {
		with = append(with, fmt.Sprintf("NumRecentEvents (%d)", req.NumRecentEvents))
	}
	if !req.After.IsZero() {
		with = append(with, fmt.Sprintf("After (%s)", req.After.UTC().Format(time.RFC3339Nano)))
	}
	if len(with) == 0 {
		return nil
	}
	return fmt.Errorf("%w: Compacted: the compacted view is of the whole history, not with %s", ErrInvalidArgument, strings.Join(with, " and "))
}

// answeredIDs is the response ids that the events of recs answer where
// they are kept (a compaction's compacted content's): the calls of those
// ids belong to the view (cache.CompactedCalls).
func answeredIDs(recs []cache.EventRecord) ([]string, error) {
	events, err := decodeEvents(recs)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range events {
		ids = appendResponseIDs(ids, answeredContent(e))
	}
	return ids, nil
}

// compactedRecords is the records of CompactedView of the events snap
// holds: from the compaction index, a superset of the view; otherwise the
// whole history, of which it then builds the index in Redis
// (cache.BuildIndex), so that the next compacted read of the session is
// the index's. events is snap.Events decoded, when the caller has them
// (nil: decoded here). It returns the kept events decoded too when they are
// at least half of those decoded (from the index, the common case: the
// superset is the view but for a few events); otherwise nil, and the caller
// decodes the kept records again on their own: decoded events share one
// buffer (decodeEvents), and a handle showing k events must not hold the n
// of the history.
func (s *Service) compactedRecords(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot, events []*Event) ([]cache.EventRecord, []*Event, error) {
	recs := snap.Events
	if events == nil {
		var err error
		if events, err = decodeEvents(recs); err != nil {
			return nil, nil, err
		}
	}
	if !snap.Indexed {
		// A build that fails (the session moved on meanwhile, Redis is full)
		// fails no read: a later read builds the index.
		_ = s.buildIndex(ctx, a, snap, events)
	}
	keep := compactedViewIndexes(events)
	out := make([]cache.EventRecord, len(keep))
	for i, j := range keep {
		out[i] = recs[j]
	}
	if 2*len(keep) < len(events) {
		return out, nil, nil
	}
	kept := make([]*Event, len(keep))
	for i, j := range keep {
		kept[i] = events[j]
	}
	return out, kept, nil
}

// errNotWhole: buildIndex was given part of a history.
var errNotWhole = errors.New("not the whole history")

// buildIndex builds in Redis the compaction index of the session snap holds
// whole (events: its events decoded); errNotWhole when snap holds part.
func (s *Service) buildIndex(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot, events []*Event) error {
	recs := snap.Events
	if len(recs) == 0 || int64(len(recs)) != snap.Rev || recs[0].Seq != 1 {
		return errNotWhole
	}
	idx := make([]cache.IndexedEvent, len(recs))
	for i, e := range events {
		idx[i] = cache.IndexedEvent{Ts: recs[i].Ts, InvocationID: e.InvocationID, Entry: compactionIndexEntry(e)}
	}
	return s.cache.BuildIndex(ctx, a.SessionRef, snap.Incarnation, snap.Rev, idx)
}

// sessionFromSnapshot builds a handle from what the cache returned.
func sessionFromSnapshot(ref base.SessionRef, snap *cache.Snapshot) (*Session, error) {
	return sessionFromEvents(ref, snap, nil)
}

// sessionFromEvents builds a handle from what the cache returned, with
// snap.Events decoded as events (nil: decoded here).
func sessionFromEvents(ref base.SessionRef, snap *cache.Snapshot, events []*Event) (*Session, error) {
	state, err := mergedState(snap)
	if err != nil {
		return nil, err
	}
	if decoded, ok := snap.Decoded.([]*Event); events == nil && ok && len(decoded) == len(snap.Events) {
		events = decoded // a cold read decoded them while it put them back
	}
	if events == nil {
		if events, err = decodeEvents(snap.Events); err != nil {
			return nil, err
		}
	}
	lastTs := snap.UpdateTime
	if snap.Rev == 0 {
		lastTs = 0
	}
	return &Session{
		ref:   ref,
		state: state, events: events,
		lastUpdate: time.UnixMicro(snap.UpdateTime).UTC(),
		inc:        snap.Incarnation, rev: snap.Rev, lastTs: lastTs,
	}, nil
}

// decodeEvents decodes cached events; the cache's timestamp is
// authoritative. The events are allocated together, share one copy of the
// records (their raw members point into it) and, within each range decoded
// on one CPU (eventjson.InParallel), their repeated names.
func decodeEvents(recs []cache.EventRecord) ([]*Event, error) {
	offsets := make([]int, len(recs)+1)
	for i, r := range recs {
		offsets[i+1] = offsets[i] + len(r.JSON)
	}
	buf := make([]byte, offsets[len(recs)])
	evs := make([]Event, len(recs))
	out := make([]*Event, len(recs))
	err := eventjson.InParallel(len(recs), func(from, to int) error {
		names := map[string]string{}
		for i := from; i < to; i++ {
			r := recs[i]
			raw := buf[offsets[i]:offsets[i+1]:offsets[i+1]]
			copy(raw, r.JSON)
			ev := &evs[i]
			if err := unmarshalEvent(raw, ev, names); err != nil {
				return fmt.Errorf("event %d: %w", r.Seq, err)
			}
			ev.Timestamp = time.UnixMicro(r.Ts).UTC()
			fillCachedMaps(&ev.Actions)
			out[i] = ev
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fillCachedMaps gives a cached event the maps of its actions that the
// cached form leaves out when they are empty (jsonWriter.cached): a read
// returns them empty, as it does an event of the database's rows, which
// have them.
func fillCachedMaps(a *EventActions) {
	if a.ArtifactDelta == nil {
		a.ArtifactDelta = map[string]int64{}
	}
	if a.RequestedAuthConfigs == nil {
		a.RequestedAuthConfigs = map[string]json.RawMessage{}
	}
	if a.RequestedToolConfirmations == nil {
		a.RequestedToolConfirmations = map[string]json.RawMessage{}
	}
}

// UserStateRequest names the user whose state GetUserState reads.
type UserStateRequest struct {
	AppName string
	UserID  string
}

// GetUserState returns the user-scoped state of (req.AppName, req.UserID),
// keys without the "user:" prefix; empty when the user has none.
func (s *Service) GetUserState(ctx context.Context, req *UserStateRequest) (map[string]any, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: GetUserState: nil request", ErrInvalidArgument)
	}
	appName, userID := req.AppName, req.UserID
	if err := checkID("AppName", appName, MaxIDBytes); err != nil {
		return nil, err
	}
	if err := checkID("UserID", userID, MaxIDBytes); err != nil {
		return nil, err
	}
	var m map[string]string
	err := s.loader.Run(ctx, base.SessionRef{App: appName, User: userID}, func() error {
		var ok bool
		var err error
		if m, ok, err = s.cache.UserState(ctx, appName, userID); err == nil && !ok {
			return cache.ErrUserNotCached
		}
		return err
	})
	if errors.Is(err, cache.ErrUserNotCached) {
		err = nil // no database, or lost again: the user has no state Redis can show
	}
	if err != nil {
		return nil, fmt.Errorf("get user state of %s: %w", userID, err)
	}
	return mergedState(&cache.Snapshot{State: m})
}
