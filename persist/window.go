package persist

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// eventsQuery returns the query for the events of key with timestamp >=
// after (zero: no bound), newest first, skipping the newest skip of them and
// returning at most limit (0: all), with its arguments. It walks
// idx_events_app_user_session_ts: O(log n + skip + limit).
func (d *dialect) eventsQuery(key SessionKey, after time.Time, limit int, skip int64) (string, []any) {
	q := `SELECT id, invocation_id, "timestamp", event_data FROM events
WHERE app_name = $1 AND user_id = $2 AND session_id = $3`
	args := []any{key.AppName, key.UserID, key.SessionID}
	if !after.IsZero() {
		args = append(args, formatTime(ceilMicro(after)))
		q += ` AND "timestamp" >= $4`
	}
	lim := d.noLimit
	if limit > 0 {
		lim = limit
	}
	args = append(args, lim, skip)
	q += fmt.Sprintf(` ORDER BY "timestamp" DESC LIMIT $%d OFFSET $%d`, len(args)-1, len(args))
	return q, args
}

// ceilMicro rounds t up to a whole microsecond, the precision of the
// columns, so that "timestamp >= t" keeps its meaning.
func ceilMicro(t time.Time) time.Time {
	if c := t.Truncate(time.Microsecond); c.Before(t) {
		return c.Add(time.Microsecond)
	}
	return t
}

// loadEvents reads the events of window w older than seq beforeSeq (0: no
// bound), oldest first, for a session whose last event has seq rev. Seqs
// count back from rev, so they assume the database has every event of the
// session up to rev.
func (s *Store) loadEvents(ctx context.Context, q querier, key SessionKey, w Window, rev, beforeSeq int64) ([]EventRow, error) {
	var skip int64
	if beforeSeq > 0 {
		skip = max(0, rev-beforeSeq+1)
	}
	query, args := s.d.eventsQuery(key, w.After, w.NumRecentEvents, skip)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var events []EventRow
	for rows.Next() {
		e := EventRow{Key: key, Seq: rev - skip - int64(len(events))}
		var ts dbTime
		if err := rows.Scan(&e.ID, &e.InvocationID, &ts, &e.Data); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		e.Timestamp = ts.t
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	slices.Reverse(events)
	return events, nil
}
