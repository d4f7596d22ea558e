package service

import (
	"context"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// DeleteRequest names a session to delete.
type DeleteRequest struct{ AppName, UserID, SessionID string }

// Delete removes a session and its events (app and user state stay).
// Deleting a missing session is not an error.
func (s *Service) Delete(ctx context.Context, req *DeleteRequest) error {
	if req == nil {
		return nilArgument("delete request")
	}
	if err := checkSession(req.AppName, req.UserID, req.SessionID); err != nil {
		return err
	}
	if _, err := s.cache.Delete(ctx, base.SessionRef{App: req.AppName, User: req.UserID, ID: req.SessionID}); err != nil {
		return fmt.Errorf("delete %s: %w", base.SessionName(req.AppName, req.UserID, req.SessionID), err)
	}
	return nil
}
