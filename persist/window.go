package persist

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/adksession/adksession/cache/base"
)

// eventsQuery returns the query for the events of key with timestamp >=
// after (zero: no bound), newest first, skipping the newest skip of them and
// returning at most limit (0: all), with its arguments. It walks
// idx_events_app_user_session_ts: O(log n + skip + limit).
func (d *dialect) eventsQuery(key base.SessionRef, after time.Time, limit int, skip int64) (string, []any) {
	q := `SELECT ` + eventColumns + ` FROM events
WHERE app_name = ? AND user_id = ? AND session_id = ?`
	args := []any{key.App, key.User, key.ID}
	if !after.IsZero() {
		args = append(args, formatTime(ceilMicro(after)))
		q += ` AND "timestamp" >= ?`
	}
	lim := d.noLimit
	if limit > 0 {
		lim = limit
	}
	return d.rebind(q + ` ORDER BY "timestamp" DESC LIMIT ? OFFSET ?`), append(args, lim, skip)
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
func (s *Store) loadEvents(ctx context.Context, q sqlx.QueryerContext, key base.SessionRef, w Window, rev, beforeSeq int64, prepare Prepare) ([]EventRow, error) {
	var skip int64
	if beforeSeq > 0 {
		skip = max(0, rev-beforeSeq+1)
	}
	query, args := s.d.eventsQuery(key, w.After, w.NumRecentEvents, skip)
	rows, err := s.readEvents(ctx, q, key, query, args, prepare)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	if rev-skip-int64(len(rows)) < 0 {
		// The database holds more events than rev says (a row whose events
		// someone else wrote without a trace adksession sees): number them
		// by counting, so that every seq is at least 1 and a read never
		// fails on it.
		n, err := countEvents(ctx, q, key)
		if err != nil {
			return nil, err
		}
		if n > rev {
			if beforeSeq > 0 {
				beforeSeq += n - rev
			}
			return s.loadEvents(ctx, q, key, w, n, beforeSeq, prepare)
		}
	}
	events := make([]EventRow, len(rows))
	for i, r := range rows { // newest first
		e := r.event(s.d, key)
		e.Seq = rev - skip - int64(i)
		e.Timestamp = r.Timestamp.eventTime(e.Seq)
		e.Prepared = r.prepared
		events[len(rows)-1-i] = e
	}
	return events, nil
}

// readEvents runs query, an events query of eventColumns. prepare, when not
// nil, is called on every row whose time is in the range served (its
// timestamp does not depend on its seq) on one goroutine, in the order the
// rows come in, while the rest are read; its first error is readEvents'.
func (s *Store) readEvents(ctx context.Context, q sqlx.QueryerContext, key base.SessionRef, query string, args []any, prepare Prepare) ([]*storedEvent, error) {
	rs, err := q.QueryxContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var (
		rows     []*storedEvent
		prepared chan *storedEvent
		done     chan error
	)
	if prepare != nil {
		prepared, done = make(chan *storedEvent, 64), make(chan error, 1)
		go func() {
			var first error
			for r := range prepared {
				if first == nil {
					e := r.event(s.d, key)
					r.prepared, first = prepare(&e)
				}
			}
			done <- first
		}()
	}
	for rs.Next() {
		r := new(storedEvent)
		if err = rs.StructScan(r); err != nil {
			break
		}
		rows = append(rows, r)
		if prepared != nil && r.Timestamp.out == 0 {
			prepared <- r
		}
	}
	if prepared != nil {
		close(prepared)
		if perr := <-done; err == nil {
			err = perr
		}
	}
	if err == nil {
		err = rs.Err()
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// eventColumns are the columns of an events row that an storedEvent receives.
const eventColumns = `id, invocation_id, "timestamp", event_data`

// storedEvent receives eventColumns: an events row.
type storedEvent struct {
	ID           string `db:"id"`
	InvocationID string `db:"invocation_id"`
	Timestamp    dbTime `db:"timestamp"`
	Data         []byte `db:"event_data"`
	prepared     string // what a load's Prepare made of it (readEvents)
}

// event returns the row, read through dialect d, as an event of session
// key, without its seq.
func (r *storedEvent) event(d *dialect, key base.SessionRef) EventRow {
	return EventRow{Key: key, ID: r.ID, InvocationID: r.InvocationID, Timestamp: r.Timestamp.t, Data: r.Data, ValidJSON: d.jsonb}
}

// TimeRange is the events with After < timestamp < Before (zero After: no
// lower bound).
type TimeRange struct{ After, Before time.Time }

// eventsAtQuery is LoadEventsAt's query ("" when it reads nothing) and its
// arguments: one point or range read of idx_events_app_user_session_ts per
// part, joined by UNION ALL.
func (d *dialect) eventsAtQuery(key base.SessionRef, at []time.Time, ranges []TimeRange) (string, []any) {
	where := `SELECT ` + eventColumns + ` FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?`
	var parts []string
	var args []any
	for lo := 0; lo < len(at); lo += pointsPerQuery {
		chunk := at[lo:min(lo+pointsPerQuery, len(at))]
		args = append(args, key.App, key.User, key.ID)
		for _, t := range chunk {
			args = append(args, formatTime(t))
		}
		parts = append(parts, where+` AND "timestamp" IN (?`+strings.Repeat(`, ?`, len(chunk)-1)+`)`)
	}
	for _, r := range ranges {
		args = append(args, key.App, key.User, key.ID)
		q := where
		if !r.After.IsZero() {
			q += ` AND "timestamp" > ?`
			args = append(args, formatTime(r.After))
		}
		parts = append(parts, q+` AND "timestamp" < ?`)
		args = append(args, formatTime(r.Before))
	}
	if len(parts) == 0 {
		return "", nil
	}
	return d.rebind(strings.Join(parts, "\nUNION ALL\n") + ` ORDER BY "timestamp"`), args
}

// pointsPerQuery bounds the timestamps of one IN list.
const pointsPerQuery = 500

// LoadEventsAt reads the events of key whose timestamp is one of at or lies
// within one of ranges, oldest first, each once, without their seqs (0): a
// compacted view's events older than the cached tail, which the compaction
// index names by time. Each part is a range or point read of
// idx_events_app_user_session_ts: O(log n) per range and point, plus the
// events read.
func (s *Store) LoadEventsAt(ctx context.Context, key base.SessionRef, at []time.Time, ranges []TimeRange) ([]EventRow, error) {
	query, args := s.d.eventsAtQuery(key, at, ranges)
	if query == "" {
		return nil, nil
	}
	var rows []storedEvent
	if err := sqlx.SelectContext(ctx, s.rd, &rows, query, args...); err != nil {
		return nil, fmt.Errorf("load events of %s by time: %w", key, err)
	}
	return s.distinctEvents(key, rows), nil // a point within a range comes twice
}
