package loader

import (
	"context"
	"encoding/json"
	"time"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// noDatabase is "no database", one value: the Database of a Loader whose
// Options have none (Redis is the only copy). It holds nothing, so every
// read answers "nothing": base.ErrNotFound for a session or an event, no
// rows, no sessions, empty states. The readers that only look something up
// in the database (StoredEvent, HoldsEvent, CreateState, the listings, the
// older events of a window) take its answers as they would a database's.
//
// The protocols that exist only with a database (putting back what Redis
// lost, the flush, the prune) ask Loader.Durable instead: without a
// database Redis never lets go of anything (no key gets a TTL), and a read
// guard, which those protocols write, has no place in a Redis that is the
// only copy.
type noDatabase struct{}

var _ Database = noDatabase{}

func (noDatabase) LoadSessionEvents(context.Context, base.SessionRef, persist.Window, persist.Prepare) (*persist.LoadedSession, error) {
	return nil, base.ErrNotFound
}

func (noDatabase) LoadEvents(context.Context, base.SessionRef, persist.Window, int64) ([]persist.EventRow, error) {
	return nil, nil
}

func (noDatabase) LoadEventsAt(context.Context, base.SessionRef, []time.Time, []persist.TimeRange) ([]persist.EventRow, error) {
	return nil, nil
}

func (noDatabase) LoadViewEvents(context.Context, base.SessionRef, persist.ViewQuery) ([]persist.EventRow, error) {
	return nil, nil
}

func (noDatabase) LoadEvent(context.Context, base.SessionRef, string) (*persist.EventRow, error) {
	return nil, base.ErrNotFound
}

func (noDatabase) LoadCreateState(context.Context, base.SessionRef, int64) (map[string]json.RawMessage, bool, error) {
	return nil, false, nil
}

func (noDatabase) LoadUserState(context.Context, string, string) (map[string]json.RawMessage, persist.StateVersion, error) {
	return map[string]json.RawMessage{}, persist.StateVersion{}, nil
}

func (noDatabase) LoadAppState(context.Context, string) (map[string]json.RawMessage, int64, error) {
	return map[string]json.RawMessage{}, 0, nil
}

func (noDatabase) ListSessions(context.Context, string, base.SessionRef, int) (*persist.Listing, error) {
	return &persist.Listing{Users: map[string]map[string]json.RawMessage{}}, nil
}

func (noDatabase) ReadSessions(context.Context, string, []base.SessionRef) (*persist.Listing, error) {
	return &persist.Listing{Users: map[string]map[string]json.RawMessage{}}, nil
}

func (noDatabase) SessionTimes(context.Context, string, string) ([]persist.SessionTime, error) {
	return nil, nil
}
