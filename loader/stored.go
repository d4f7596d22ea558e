package loader

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// StoredEvent reads the event with id of session ref from the database,
// whatever its age, in the form Redis keeps (its API form; Seq not filled
// in): what an append compares a retried event with when Redis no longer
// holds the event with its id. base.ErrNotFound when the database has no
// such event, or there is no database.
func (l *Loader) StoredEvent(ctx context.Context, ref base.SessionRef, id string) (*cache.EventRecord, error) {
	row, err := l.db.LoadEvent(ctx, ref, id)
	if err != nil {
		return nil, err
	}
	js, err := apiEvent(row)
	if err != nil {
		return nil, err
	}
	return &cache.EventRecord{Ts: row.Timestamp.UnixMicro(), JSON: js, ID: row.ID}, nil
}

// HoldsEvent tells whether the database holds an event with id in session
// ref, whatever its content (false without a database).
func (l *Loader) HoldsEvent(ctx context.Context, ref base.SessionRef, id string) (bool, error) {
	_, err := l.db.LoadEvent(ctx, ref, id)
	if errors.Is(err, base.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// CreateState returns the session-scoped state that incarnation
// incarnation of session ref was created with, as the flusher recorded it
// in the database; ok is false when the database does not know it (a
// session ADK wrote, another incarnation) or there is no database.
func (l *Loader) CreateState(ctx context.Context, ref base.SessionRef, incarnation int64) (state map[string]json.RawMessage, ok bool, err error) {
	return l.db.LoadCreateState(ctx, ref, incarnation)
}
