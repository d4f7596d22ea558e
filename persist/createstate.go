package persist

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/adksession/adksession/cache/base"
)

const readCreateState = `SELECT create_state FROM adksession_sessions
WHERE app_name = $1 AND user_id = $2 AND session_id = $3 AND incarnation = $4 AND NOT deleted`

// LoadCreateState returns the session-scoped state that incarnation
// incarnation of session key was created with, as the flusher recorded it
// (adksession_sessions.create_state). ok is false when the database does not
// know it: a session ADK wrote, one flushed before adksession recorded it, or
// another incarnation.
func (s *Store) LoadCreateState(ctx context.Context, key base.SessionRef, incarnation int64) (state map[string]json.RawMessage, ok bool, err error) {
	var raw sql.NullString
	err = s.rd.GetContext(ctx, &raw, readCreateState, key.App, key.User, key.ID, incarnation)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("load create-time state of %s: %w", key, err)
	}
	if !raw.Valid {
		return nil, false, nil
	}
	if err := json.Unmarshal([]byte(raw.String), &state); err != nil {
		return nil, false, fmt.Errorf("load create-time state of %s: %w", key, err)
	}
	return state, true, nil
}
