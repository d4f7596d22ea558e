package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
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

// Create creates a session. An existing id of the same (app, user) is
// ErrAlreadyExists, atomically: of two concurrent creates of one id exactly
// one wins. The handle returned holds the merged state, as Get returns it.
// When that state cannot be read after the session was stored (Redis
// restarting, or the app or user state to load from a database that is
// down) the read is tried again until ctx ends; then Create returns the
// error: the session exists, and a Get reads it once the outage is over.
func (s *Service) Create(ctx context.Context, req *CreateRequest) (*CreateResponse, error) {
	if req == nil {
		return nil, nilArgument("create request")
	}
	sid := req.SessionID
	if sid == "" {
		sid = uuid.NewString()
	}
	if err := checkSession(req.AppName, req.UserID, sid); err != nil {
		return nil, err
	}
	state := make(map[string]any, len(req.State))
	for k, v := range req.State {
		if !strings.HasPrefix(k, TempPrefix) {
			state[k] = v
		}
	}
	delta, _, err := s.splitDelta("State", state)
	if err != nil {
		return nil, err
	}
	now := time.Now().Truncate(time.Microsecond)
	if err := s.takeAppOrder(ctx, req.AppName, &delta); err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return nil, err // a state cap: the error names the app
		}
		return nil, fmt.Errorf("create %s: app state: %w", base.SessionName(req.AppName, req.UserID, sid), err)
	}
	args := cache.CreateArgs{SessionRef: base.SessionRef{App: req.AppName, User: req.UserID, ID: sid}, CreateTime: now.UnixMicro(), Token: uuid.NewString(), Delta: delta}
	err = s.loader.Run(ctx, args.SessionRef, func() error { return s.cache.Create(ctx, args) })
	switch {
	case errors.Is(err, ErrAlreadyExists):
		return nil, sessionError(ErrAlreadyExists, req.AppName, req.UserID, sid)
	case errors.Is(err, ErrInvalidArgument):
		return nil, err // a state cap: the error names the scope
	case err != nil:
		return nil, fmt.Errorf("create %s: %w", base.SessionName(req.AppName, req.UserID, sid), err)
	}
	if err := s.applyApp(ctx, req.AppName, cache.AppChange{ID: cache.CreateChangeID(args.CreateTime, req.UserID, sid), Order: delta.AppOrder, Pairs: delta.App}); err != nil {
		return nil, fmt.Errorf("create %s: app state: %w", base.SessionName(req.AppName, req.UserID, sid), err)
	}
	// The handle sees the state as a Get would: with the app and user state
	// other sessions wrote. The session is stored: a read that fails is
	// tried again until ctx ends. A handle without that state would answer
	// wrong values as if they were the session's, so none is returned then.
	var resp *GetResponse
	err = untilDone(ctx, func() (err error) {
		resp, err = s.Get(ctx, &GetRequest{AppName: req.AppName, UserID: req.UserID, SessionID: sid})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: stored, but its state could not be read: %w", base.SessionName(req.AppName, req.UserID, sid), err)
	}
	return &CreateResponse{Session: resp.Session}, nil
}
