package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/loader"
	"github.com/adksession/adksession/persist"
)

// CreateRequest asks for a new session.
type CreateRequest struct {
	AppName, UserID string
	// SessionID: empty gets a UUIDv4.
	SessionID string
	// State: initial state, split by scope like a delta; temp: keys are dropped.
	State map[string]any
}

// CreateResponse holds the new session.
type CreateResponse struct{ Session *Session }

// GetRequest asks for a session and a window of its events.
type GetRequest struct {
	AppName, UserID, SessionID string
	// NumRecentEvents > 0 keeps the newest n events (of those After lets through).
	NumRecentEvents int
	// After keeps events with timestamp >= After (inclusive); zero = all.
	After time.Time
	// InvocationID includes the temp: state of that running invocation.
	InvocationID string
}

// GetResponse holds the session.
type GetResponse struct{ Session *Session }

// ListRequest asks for sessions of a user, or of the whole app when UserID is empty.
type ListRequest struct {
	AppName, UserID string
	// PageSize: default 100.
	PageSize int
	// PageToken: NextPageToken of the previous page; empty for the first.
	PageToken string
}

// ListResponse is a page of sessions (merged state, no events).
type ListResponse struct {
	Sessions      []*Session
	NextPageToken string
}

// DeleteRequest names a session to delete.
type DeleteRequest struct{ AppName, UserID, SessionID string }

// Create creates a session. An existing id of the same (app, user) is
// ErrAlreadyExists, atomically: of two concurrent creates of one id exactly
// one wins.
func (s *Service) Create(ctx context.Context, req *CreateRequest) (*CreateResponse, error) {
	sid := req.SessionID
	if sid == "" {
		sid = uuid.NewString()
	}
	if err := checkSession(req.AppName, req.UserID, sid); err != nil {
		return nil, err
	}
	state := make(map[string]any, len(req.State))
	for k, v := range req.State {
		if !hasPrefix(k, TempPrefix) {
			state[k] = v
		}
	}
	delta, normalized, err := s.splitDelta("State", state)
	if err != nil {
		return nil, err
	}
	if err := s.checkNotInDatabase(ctx, req.AppName, req.UserID, sid); err != nil {
		return nil, err
	}
	now := time.Now().Truncate(time.Microsecond)
	args := cache.CreateArgs{App: req.AppName, User: req.UserID, SID: sid, CreateTime: now.UnixMicro(), Delta: delta}
	err = s.cache.Create(ctx, args)
	for attempt := 0; attempt < 2 && s.db != nil && isRecoverable(err); attempt++ {
		if err = s.loader.Recover(ctx, req.AppName, req.UserID, sid, err); err == nil {
			err = s.cache.Create(ctx, args)
		}
	}
	switch {
	case errors.Is(err, cache.ErrExists):
		return nil, fmt.Errorf("%w: session %s of app %s, user %s", ErrAlreadyExists, sid, req.AppName, req.UserID)
	case err != nil:
		return nil, fmt.Errorf("create session %s: %w", sid, err)
	}
	if err := s.applyApp(ctx, req.AppName, cache.CreateChangeID(args.CreateTime, req.UserID, sid), delta.App); err != nil {
		return nil, fmt.Errorf("create session %s: app state: %w", sid, err)
	}
	// The handle sees the state as a Get would: with the app and user state
	// other sessions wrote.
	resp, err := s.Get(ctx, &GetRequest{AppName: req.AppName, UserID: req.UserID, SessionID: sid})
	if err != nil {
		sess := &Session{id: sid, appName: req.AppName, userID: req.UserID, state: normalized, lastUpdate: now}
		if sess.state == nil {
			sess.state = map[string]any{}
		}
		return &CreateResponse{Session: sess}, nil
	}
	return &CreateResponse{Session: resp.Session}, nil
}

// checkNotInDatabase refuses an id that only the database still holds
// (evicted from Redis); a deleted one whose delete is not flushed yet is free.
func (s *Service) checkNotInDatabase(ctx context.Context, app, user, sid string) error {
	if s.db == nil {
		return nil
	}
	// While Redis holds the user, its session index lists every session the
	// database has: no database round trip (and creates go on while the
	// database is down).
	if cached, indexed, err := s.cache.UserIndexHas(ctx, app, user, sid); err != nil || (cached && !indexed) {
		return err
	}
	ok, err := s.db.SessionExists(ctx, persist.SessionKey{AppName: app, UserID: user, SessionID: sid})
	if err != nil {
		return fmt.Errorf("create session %s: %w", sid, err)
	}
	if !ok {
		return nil
	}
	if dead, err := s.cache.Tombstoned(ctx, app, user, sid); err != nil || dead {
		return err
	}
	return fmt.Errorf("%w: session %s of app %s, user %s", ErrAlreadyExists, sid, app, user)
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// Get returns a session with a window of its events and its full current
// state. An unknown session, or one of another user or app, is ErrNotFound.
func (s *Service) Get(ctx context.Context, req *GetRequest) (*GetResponse, error) {
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return nil, err
	}
	if req.NumRecentEvents < 0 {
		return nil, fmt.Errorf("%w: NumRecentEvents: %d is negative", ErrInvalidArgument, req.NumRecentEvents)
	}
	after := int64(-1)
	if !req.After.IsZero() {
		after = req.After.UnixMicro()
	}
	snap, err := s.loader.Get(ctx, cache.GetArgs{
		App: req.AppName, User: req.UserID, SID: req.SessionID,
		After: after, NumRecent: req.NumRecentEvents, InvocationID: req.InvocationID,
	})
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return nil, fmt.Errorf("%w: session %s of app %s, user %s", ErrNotFound, req.SessionID, req.AppName, req.UserID)
	case err != nil:
		return nil, fmt.Errorf("get session %s: %w", req.SessionID, err)
	}
	sess, err := sessionFromSnapshot(req.AppName, req.UserID, req.SessionID, snap)
	if err != nil {
		return nil, fmt.Errorf("get session %s: %w", req.SessionID, err)
	}
	if len(snap.Temp) > 0 {
		sess.tempInv = req.InvocationID
	}
	return &GetResponse{Session: sess}, nil
}

// sessionFromSnapshot builds a handle from what the cache returned.
func sessionFromSnapshot(app, user, sid string, snap *cache.Snapshot) (*Session, error) {
	state, err := mergedState(snap)
	if err != nil {
		return nil, err
	}
	events, err := decodeEvents(snap.Events)
	if err != nil {
		return nil, err
	}
	lastTs := snap.UpdateTime
	if snap.Rev == 0 {
		lastTs = 0
	}
	return &Session{
		id: sid, appName: app, userID: user,
		state: state, events: events,
		lastUpdate: time.UnixMicro(snap.UpdateTime).UTC(),
		rev:        snap.Rev, lastTs: lastTs,
	}, nil
}

// decodeEvents decodes cached events; the cache's timestamp is authoritative.
func decodeEvents(recs []cache.EventRecord) ([]*Event, error) {
	out := make([]*Event, len(recs))
	for i, r := range recs {
		ev := &Event{}
		// UnmarshalJSON validates as it decodes: json.Unmarshal would scan
		// the whole event once more first.
		if err := ev.UnmarshalJSON([]byte(r.JSON)); err != nil {
			return nil, fmt.Errorf("event %d: %w", r.Seq, err)
		}
		ev.Timestamp = time.UnixMicro(r.Ts).UTC()
		out[i] = ev
	}
	return out, nil
}

// List returns a page of the sessions of (app, user), newest update first,
// or of the whole app when UserID is empty (in a stable order). Sessions
// carry their merged state and no events.
func (s *Service) List(ctx context.Context, req *ListRequest) (*ListResponse, error) {
	if err := checkID("AppName", req.AppName, MaxIDBytes); err != nil {
		return nil, err
	}
	if req.UserID != "" {
		if err := checkID("UserID", req.UserID, MaxIDBytes); err != nil {
			return nil, err
		}
	}
	size := req.PageSize
	switch {
	case size < 0:
		return nil, fmt.Errorf("%w: PageSize: %d is negative", ErrInvalidArgument, size)
	case size == 0:
		size = 100
	case size > 10000:
		return nil, fmt.Errorf("%w: PageSize: %d, limit 10000", ErrInvalidArgument, size)
	}
	var items []cache.ListItem
	var next string
	var err error
	if err := s.completeIndex(ctx, req.AppName, req.UserID); err != nil {
		return nil, err
	}
	if req.UserID != "" {
		items, next, err = s.cache.ListUser(ctx, req.AppName, req.UserID, req.PageToken, size)
	} else {
		items, next, err = s.cache.ListApp(ctx, req.AppName, req.PageToken, size)
	}
	if errors.Is(err, cache.ErrBadToken) {
		return nil, fmt.Errorf("%w: PageToken: %v", ErrInvalidArgument, err)
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	resp := &ListResponse{NextPageToken: next, Sessions: make([]*Session, 0, len(items))}
	for _, it := range items {
		if it.Snap == nil && s.db != nil {
			// Indexed, but evicted: read it through.
			if it.Snap, err = s.loader.Get(ctx, cache.GetArgs{App: req.AppName, User: it.User, SID: it.SID, After: -1, NumRecent: 1}); err != nil && !errors.Is(err, loader.ErrNotFound) {
				return nil, fmt.Errorf("list sessions: %w", err)
			}
			if it.Snap != nil {
				it.Snap.Events = nil
			}
		}
		if it.Snap == nil {
			continue
		}
		sess, err := sessionFromSnapshot(req.AppName, it.User, it.SID, it.Snap)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		resp.Sessions = append(resp.Sessions, sess)
	}
	return resp, nil
}

// completeIndex makes sure Redis's index of the sessions of a user (or of
// the whole app) lists every session the database has, after Redis lost it.
func (s *Service) completeIndex(ctx context.Context, app, user string) error {
	if s.db == nil {
		return nil
	}
	if user != "" {
		if _, ok, err := s.cache.UserState(ctx, app, user); err != nil || ok {
			return err
		}
		return s.loader.Recover(ctx, app, user, "", cache.ErrUserNotCached)
	}
	return s.loader.CompleteAppIndex(ctx, app)
}

// Delete removes a session and its events (app and user state stay).
// Deleting a missing session is not an error.
func (s *Service) Delete(ctx context.Context, req *DeleteRequest) error {
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return err
	}
	if _, err := s.cache.Delete(ctx, req.AppName, req.UserID, req.SessionID); err != nil {
		return fmt.Errorf("delete session %s: %w", req.SessionID, err)
	}
	return nil
}

// GetUserState returns the user-scoped state of (app, user), keys without
// the "user:" prefix; empty when the user has none.
func (s *Service) GetUserState(ctx context.Context, appName, userID string) (map[string]any, error) {
	if err := checkID("AppName", appName, MaxIDBytes); err != nil {
		return nil, err
	}
	if err := checkID("UserID", userID, MaxIDBytes); err != nil {
		return nil, err
	}
	m, ok, err := s.cache.UserState(ctx, appName, userID)
	if err == nil && !ok && s.db != nil {
		if err = s.loader.Recover(ctx, appName, userID, "", cache.ErrUserNotCached); err == nil {
			m, _, err = s.cache.UserState(ctx, appName, userID)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("get user state of %s: %w", userID, err)
	}
	return mergedState(&cache.Snapshot{State: m})
}
