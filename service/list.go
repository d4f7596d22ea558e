package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/loader"
)

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

// List returns a page of the sessions of (app, user), newest update first,
// or of the whole app when UserID is empty (in (user id, session id) byte
// order, which appends never change). Sessions carry their merged state and
// no events; those Redis no longer holds are read from the database, one
// query per page, without loading their events.
func (s *Service) List(ctx context.Context, req *ListRequest) (*ListResponse, error) {
	if req == nil {
		return nil, nilArgument("list request")
	}
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
	var items []loader.Listed
	var next string
	var err error
	if req.UserID != "" {
		items, next, err = s.loader.ListUser(ctx, req.AppName, req.UserID, req.PageToken, size)
	} else {
		items, next, err = s.loader.ListApp(ctx, req.AppName, req.PageToken, size)
	}
	if errors.Is(err, ErrInvalidArgument) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	resp := &ListResponse{NextPageToken: next, Sessions: make([]*Session, 0, len(items))}
	for _, it := range items {
		sess, err := sessionFromSnapshot(base.SessionRef{App: req.AppName, User: it.User, ID: it.SID}, it.Snap)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		resp.Sessions = append(resp.Sessions, sess)
	}
	return resp, nil
}
