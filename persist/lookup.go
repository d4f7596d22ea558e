package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

// LoadEvent reads the event of a session with the given id, whatever its
// age; base.ErrNotFound when the database has none. Seq is not filled in. It is
// one primary-key lookup: the append path uses it to tell a retried event
// from a new one when the session's older events are no longer in Redis.
func (s *Store) LoadEvent(ctx context.Context, key base.SessionRef, id string) (*EventRow, error) {
	var r storedEvent
	err := s.rd.GetContext(ctx, &r, `SELECT `+eventColumns+` FROM events
WHERE id = $1 AND app_name = $2 AND user_id = $3 AND session_id = $4`,
		id, key.App, key.User, key.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, base.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up event %q of %s: %w", id, key, err)
	}
	e := r.event(s.d, key)
	return &e, nil
}
