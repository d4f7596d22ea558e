// Package loader owns the protocols that span Redis and the database. It is
// adksession's read path and the one owner of recovery: cache-first reads of
// sessions with their event windows, and (with a database) putting back what
// Redis no longer holds, atomically (hydrate.lua writes only if no append or
// other loader got there first). Every script call that may find its data
// gone runs through Loader.Run, which puts the session, user or app state
// back and runs the call again. The writes read the database through it too
// (StoredEvent, HoldsEvent, CreateState). It runs the other two protocols
// that span both stores: the write-behind (Flusher: the change log into the
// database, then the marks and acknowledgements in Redis) and the prune
// (Prune). It uses the database through Database, FlushDatabase and
// PruneDatabase, the slices of *persist.Store each needs, and Redis through
// *cache.Store (the flusher through flushCache, its slice).
//
// It is internal to adksession: its exported names serve package service and
// may change at any time. Programs use package service.
package loader

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/persist"
)

// Database is what a Loader reads from the database: the read side of
// *persist.Store, and nothing it writes. A cold read, a listing and an
// older window ask it for rows and put what they read back into Redis; an
// append asks it for an event by id, a rewind and a fork for the state a
// session was created with (StoredEvent, HoldsEvent, CreateState).
type Database interface {
	LoadSessionEvents(ctx context.Context, key base.SessionRef, w persist.Window, prepare persist.Prepare) (*persist.LoadedSession, error)
	LoadEvents(ctx context.Context, key base.SessionRef, w persist.Window, beforeSeq int64) ([]persist.EventRow, error)
	LoadEventsAt(ctx context.Context, key base.SessionRef, at []time.Time, ranges []persist.TimeRange) ([]persist.EventRow, error)
	LoadViewEvents(ctx context.Context, key base.SessionRef, q persist.ViewQuery) ([]persist.EventRow, error)
	LoadEvent(ctx context.Context, key base.SessionRef, id string) (*persist.EventRow, error)
	LoadCreateState(ctx context.Context, key base.SessionRef, incarnation int64) (map[string]json.RawMessage, bool, error)
	LoadUserState(ctx context.Context, app, user string) (map[string]json.RawMessage, persist.StateVersion, error)
	LoadAppState(ctx context.Context, app string) (map[string]json.RawMessage, int64, error)
	ListSessions(ctx context.Context, app string, after base.SessionRef, limit int) (*persist.Listing, error)
	ReadSessions(ctx context.Context, app string, keys []base.SessionRef) (*persist.Listing, error)
	SessionTimes(ctx context.Context, app, user string) ([]persist.SessionTime, error)
}

var _ Database = (*persist.Store)(nil)

// Options configure a Loader.
type Options struct {
	DB              Database      // nil: Redis only
	Prune           PruneDatabase // nil: no prunes (no database)
	CacheTTL        time.Duration // TTL of rehydrated (fully flushed) keys (service.Config.CacheTTL)
	MaxCachedEvents int           // events put back per session (service.Config.MaxCachedEvents)
	// Decode, when not nil, decodes events for the reader (service's
	// decodeEvents): a cold read runs it on the events it answers while it
	// puts them back, and hands its result on in Snapshot.Decoded.
	Decode func([]cache.EventRecord) (any, error)
}

// Loader reads sessions, cache first.
type Loader struct {
	cache *cache.Store
	opts  Options
	// db is opts.DB, or noDatabase without one; durable says which (the
	// protocols that exist only with a database ask it).
	db      Database
	durable bool
}

// New returns a Loader over the cache (and the database of o). The values of
// o are used as given: service.Config holds their defaults.
func New(c *cache.Store, o Options) *Loader {
	l := &Loader{cache: c, opts: o, db: o.DB, durable: o.DB != nil}
	if o.DB == nil {
		l.db = noDatabase{}
	}
	return l
}

// Durable tells whether a database backs the cache.
func (l *Loader) Durable() bool { return l.durable }

// Get reads a session with a window of events: from Redis, from the
// database for what Redis no longer holds (putting it back, see Run), and
// older events than the cached tail from the database when the window
// reaches past it.
func (l *Loader) Get(ctx context.Context, a cache.GetArgs) (*cache.Snapshot, error) {
	var snap *cache.Snapshot
	var cold *coldRead
	if !a.Compacted {
		cold = &coldRead{args: a} // a put-back answers the read (hydrateSession)
	}
	err := l.run(ctx, a.SessionRef, func() (err error) {
		if cold != nil && cold.snap != nil {
			snap, cold.snap = cold.snap, nil
			return nil
		}
		snap, err = l.cache.Get(ctx, a)
		return err
	}, cold)
	if err != nil {
		return nil, err
	}
	if err := l.completeApp(ctx, a.App, snap); err != nil {
		return nil, err
	}
	if a.Compacted && !snap.Indexed && l.ViewIndexed() {
		return snap, nil // the caller walks the database's indexes (ViewEvents), or reads the rest (OlderEvents)
	}
	return snap, l.OlderEvents(ctx, a, snap)
}

// ViewIndexed reports whether a database answers ViewEvents from its
// indexes (both dialects do): then Get leaves the events older than the
// cached tail of a compacted read without the compaction index to the
// caller.
func (l *Loader) ViewIndexed() bool { return l.durable }

// ViewEvents reads from the database the events of session a that q names
// (persist.Store.LoadViewEvents), oldest first, as records without seqs.
func (l *Loader) ViewEvents(ctx context.Context, a cache.GetArgs, q persist.ViewQuery) ([]cache.EventRecord, error) {
	rows, err := l.db.LoadViewEvents(ctx, a.SessionRef, q)
	if err != nil {
		return nil, err
	}
	return records(rows)
}

// EventsIn reads from the database the events of session a within ranges
// (persist.Store.LoadEventsAt), oldest first, as records without seqs.
func (l *Loader) EventsIn(ctx context.Context, a cache.GetArgs, ranges []persist.TimeRange) ([]cache.EventRecord, error) {
	return l.eventsAt(ctx, a.SessionRef, nil, ranges)
}

// completeApp fills in the app state when Redis has lost it.
func (l *Loader) completeApp(ctx context.Context, app string, snap *cache.Snapshot) (err error) {
	snap.App, err = l.appState(ctx, app, snap.App, snap.AppCached)
	return err
}

// appState returns an app's state as a read found it (state; cached: Redis
// held it), or, when Redis has lost it, as put back from the database.
func (l *Loader) appState(ctx context.Context, app string, state map[string]string, cached bool) (map[string]string, error) {
	if cached || !l.durable {
		return state, nil
	}
	if err := l.hydrateApp(ctx, app); err != nil {
		return nil, err
	}
	return l.cache.AppState(ctx, app)
}

// OlderEvents adds events older than the cached tail when the window
// reaches past it (all of them for a compacted read without the index).
func (l *Loader) OlderEvents(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot) error {
	if snap.First <= 1 || snap.Indexed {
		return nil
	}
	if a.NumRecent > 0 && len(snap.Events) >= a.NumRecent {
		return nil
	}
	if len(snap.Events) > 0 && snap.Events[0].Seq != snap.First {
		return nil // the window starts inside the cached tail
	}
	w := persist.Window{}
	if a.NumRecent > 0 {
		w.NumRecentEvents = a.NumRecent - len(snap.Events)
	}
	if a.After >= 0 {
		w.After = time.UnixMicro(a.After)
	}
	rows, err := l.db.LoadEvents(ctx, a.SessionRef, w, snap.First)
	if err != nil || len(rows) == 0 {
		if err != nil {
			err = fmt.Errorf("load events of %s from the database: %w", a.String(), err)
		}
		return err
	}
	older, err := records(rows)
	if err != nil {
		return err
	}
	snap.Events, snap.Decoded = append(older, snap.Events...), nil
	return nil
}

// records turns events rows into cache records (the API form Redis keeps):
// a row's Prepared when the load made it (apiEvent, while the rows came
// in), the others here, on every CPU for a long history.
func records(rows []persist.EventRow) ([]cache.EventRecord, error) {
	out := make([]cache.EventRecord, len(rows))
	err := eventjson.InParallel(len(rows), func(from, to int) error {
		for i := from; i < to; i++ {
			r := &rows[i]
			js := r.Prepared
			if js == "" {
				var err error
				if js, err = apiEvent(r); err != nil {
					return err
				}
			}
			out[i] = cache.EventRecord{Seq: r.Seq, Ts: r.Timestamp.UnixMicro(), JSON: js, ID: r.ID}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// apiEvent is an events row in the cache's form: the event's API form.
// It is the cold read's persist.Prepare.
func apiEvent(r *persist.EventRow) (string, error) {
	js, err := eventjson.APIEvent(r.Data, r.ValidJSON, r.ID, r.InvocationID, r.Timestamp)
	return string(js), err
}

// CompactedOlder completes a compacted view read from the compaction index
// (snap.Indexed) with what only the database holds: the events of
// snap.Older and snap.Ranges, older than the cached tail, and then the
// calls of the responses among the ranges' events (answered gives their
// response ids) with the answers to those calls (cache.CompactedCalls),
// from Redis and the database. snap.Events stays in seq order.
// cache.ErrIncomplete: the index went away meanwhile, or names an event
// the database does not hold at its time (read the view from the whole
// history instead).
func (l *Loader) CompactedOlder(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot, answered func([]cache.EventRecord) ([]string, error)) error {
	if !snap.Indexed || (len(snap.Older) == 0 && len(snap.Ranges) == 0) {
		return nil
	}
	key := a.SessionRef
	ranges := make([]persist.TimeRange, len(snap.Ranges))
	for i, r := range snap.Ranges {
		ranges[i].Before = time.UnixMicro(r.Hi)
		if r.Lo != math.MinInt64 {
			ranges[i].After = time.UnixMicro(r.Lo)
		}
	}
	older, err := l.eventsAt(ctx, key, snap.Older, ranges)
	if err != nil {
		return err
	}
	if len(snap.Ranges) > 0 {
		var inRanges []cache.EventRecord
		for _, r := range older {
			if r.Seq == 0 {
				inRanges = append(inRanges, r)
			}
		}
		ids, err := answered(inRanges)
		if err != nil {
			return err
		}
		if len(ids) > 0 {
			more, refs, err := l.cache.CompactedCalls(ctx, a.SessionRef, snap.Incarnation, snap.Rev, ids)
			if err != nil {
				return err
			}
			rows, err := l.eventsAt(ctx, key, refs, nil)
			if err != nil {
				return err
			}
			older = append(older, rows...)
			snap.Events = append(snap.Events, more...)
		}
	}
	// Merged by time (time order is seq order), each event once.
	all := append(older, snap.Events...)
	slices.SortStableFunc(all, func(x, y cache.EventRecord) int { return cmp.Compare(x.Ts, y.Ts) })
	snap.Events = slices.CompactFunc(all, func(x, y cache.EventRecord) bool { return x.Ts == y.Ts })
	return nil
}

// eventsAt reads from the database the events refs name and those of ranges
// (seq 0: not known), oldest first; a named event the database lacks is
// cache.ErrIncomplete.
func (l *Loader) eventsAt(ctx context.Context, key base.SessionRef, refs []cache.EventRef, ranges []persist.TimeRange) ([]cache.EventRecord, error) {
	if len(refs) == 0 && len(ranges) == 0 {
		return nil, nil
	}
	at := make([]time.Time, len(refs))
	seqs := make(map[int64]int64, len(refs))
	for i, r := range refs {
		at[i] = time.UnixMicro(r.Ts)
		seqs[r.Ts] = r.Seq
	}
	rows, err := l.db.LoadEventsAt(ctx, key, at, ranges)
	if err != nil {
		return nil, fmt.Errorf("load events of %s from the database: %w", key.String(), err)
	}
	recs, err := records(rows)
	if err != nil {
		return nil, err
	}
	found := 0
	for i := range recs {
		if seq, ok := seqs[recs[i].Ts]; ok {
			recs[i].Seq = seq
			found++
		}
	}
	if found != len(seqs) {
		// The database's times are not Redis's (rows someone else wrote, or
		// moved): the view is read from the whole history instead.
		return nil, fmt.Errorf("load events of %s from the database: %d of the %d events the compaction index names: %w",
			key.String(), found, len(seqs), cache.ErrIncomplete)
	}
	return recs, nil
}
