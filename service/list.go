package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache"
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
