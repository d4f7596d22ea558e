package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// SessionSummary is a session without its events.
type SessionSummary struct {
	Key                    SessionKey
	Incarnation, Rev       int64 // as in LoadedSession
	State                  map[string]json.RawMessage
	CreateTime, UpdateTime time.Time
}

// ListSessions returns up to limit (<= 0: all) sessions of app, of one user
// or of every user when user is "", ordered by (user id, session id) and
// starting after the keyset cursor after (zero: from the start). The next
// page starts after the last key returned.
func (s *Store) ListSessions(ctx context.Context, app, user string, after SessionKey, limit int) ([]SessionSummary, error) {
	q := `SELECT s.user_id, s.id, ` + sessionColumns + ` ` + sessionFrom + `
WHERE s.app_name = $1 AND ` + sessionLive
	args := []any{app}
	if user != "" {
		args = append(args, user)
		q += fmt.Sprintf(` AND s.user_id = $%d`, len(args))
	}
	if after != (SessionKey{}) {
		args = append(args, after.UserID, after.SessionID)
		q += fmt.Sprintf(` AND (s.user_id, s.id) > ($%d, $%d)`, len(args)-1, len(args))
	}
	lim := s.d.noLimit
	if limit > 0 {
		lim = limit
	}
	args = append(args, lim)
	q += fmt.Sprintf(` ORDER BY s.user_id, s.id LIMIT $%d`, len(args))

	rows, err := s.rd.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
	}
	defer rows.Close()
	var out []SessionSummary
	for rows.Next() {
		key := SessionKey{AppName: app}
		var r sessionRow
		if err := rows.Scan(append([]any{&key.UserID, &key.SessionID}, r.dest()...)...); err != nil {
			return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
		}
		sum, err := r.summary(key)
		if err != nil {
			return nil, fmt.Errorf("list sessions of app %q: session %q: %w", app, key.SessionID, err)
		}
		out = append(out, sum)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions of app %q: %w", app, err)
	}
	return out, nil
}
