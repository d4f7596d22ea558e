package service

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/persist"
)

// viewFromDatabase completes the compacted read of a session Redis holds
// without its compaction index and only in part (snap: its cached tail, seqs
// First on, read whole), the older part in the database only: it reads,
// through the database's indexes (persist.ViewQuery; Postgres or SQLite), a superset of
// the view within the history, the SQL side of what get.lua reads from the
// index (docs/design.md, "The compacted view", "From the database"), and puts
// it into snap.Events, oldest first, for compactedRecords to take
// CompactedView of; it returns them decoded (nil when it left snap.Events
// to loader.OlderEvents). The events it reads:
//
//   - the marked ones (every compaction of either form, rewind, scoped
//     event), and the first event of each invocation a rewind rewinds to;
//   - the events no visible plain compaction's range covers (the gaps of the
//     frontier, whose members are all among the marked), and those after the
//     endTime of ADK JS's last compacted event;
//   - each scope's calls (its first call with arguments is among them);
//   - the events calling a response id that an event read answers, and the
//     events answering the calls of those.
//
// Each is one index read: O(log n) plus the events read. Where the view is
// the history (no compaction; an ADK JS endTime that does not read as a
// time) it reads the whole history instead (loader.OlderEvents), as before.
// The walk builds no Redis index (that takes every event): Get asks for it
// to be built in the background from the whole history (buildIndexLater),
// and the compacted reads after that are the index's.
func (s *Service) viewFromDatabase(ctx context.Context, a cache.GetArgs, snap *cache.Snapshot) ([]*Event, error) {
	if snap.First <= 1 {
		return nil, nil // Redis holds the whole history
	}
	w := viewWalk{s: s, a: a, seen: map[viewKey]bool{}}
	if len(snap.Events) > 0 {
		w.before = time.UnixMicro(snap.Events[0].Ts)
	}
	whole, err := w.run(ctx, snap.Events)
	if err != nil {
		return nil, err
	}
	if whole {
		return nil, s.loader.OlderEvents(ctx, a, snap)
	}
	snap.Events = w.records
	return w.events, nil
}

// viewWalk is the state of viewFromDatabase: the events read so far (in
// time order after each step), decoded, and what of the database they come
// from (older than before; zero: no bound).
type viewWalk struct {
	s       *Service
	a       cache.GetArgs
	before  time.Time
	records []cache.EventRecord
	events  []*Event
	seen    map[viewKey]bool
}

// viewKey names an event read: the database's by time and id, Redis's by
// time (its records carry no id; they lie after the database's).
type viewKey struct {
	ts int64
	id string
}

// add merges recs into the walk, each event once, in time order.
func (w *viewWalk) add(recs []cache.EventRecord) error {
	var fresh []cache.EventRecord
	for _, r := range recs {
		if k := (viewKey{r.Ts, r.ID}); !w.seen[k] {
			w.seen[k] = true
			fresh = append(fresh, r)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	events, err := decodeEvents(fresh)
	if err != nil {
		return err
	}
	type pair struct {
		r cache.EventRecord
		e *Event
	}
	all := make([]pair, 0, len(w.records)+len(fresh))
	for i := range w.records {
		all = append(all, pair{w.records[i], w.events[i]})
	}
	for i := range fresh {
		all = append(all, pair{fresh[i], events[i]})
	}
	slices.SortStableFunc(all, func(x, y pair) int { return cmp.Compare(x.r.Ts, y.r.Ts) })
	w.records, w.events = w.records[:0], w.events[:0]
	for _, p := range all {
		w.records, w.events = append(w.records, p.r), append(w.events, p.e)
	}
	return nil
}

// query reads the events q names (below the tail) and adds them.
func (w *viewWalk) query(ctx context.Context, q persist.ViewQuery) error {
	q.Before = w.before
	recs, err := w.s.loader.ViewEvents(ctx, w.a, q)
	if err != nil {
		return err
	}
	return w.add(recs)
}

// upTo is the end of a range read below the tail: the tail's first time,
// or, without a tail, a time after every event's (they lie before 2200).
func (w *viewWalk) upTo() time.Time {
	if w.before.IsZero() {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return w.before
}

// run reads the superset, starting from the cached tail; whole: the view is
// (or may be) the whole history, which the caller reads instead.
func (w *viewWalk) run(ctx context.Context, tail []cache.EventRecord) (whole bool, err error) {
	if err := w.add(tail); err != nil {
		return false, err
	}
	if err := w.query(ctx, persist.ViewQuery{Marked: true}); err != nil {
		return false, err
	}
	// Every rewind is marked; the first event of what it rewinds to makes
	// the walk over the rewinds the history's.
	var invs []string
	for _, e := range w.events {
		if x := e.Actions.RewindBeforeInvocationID; x != "" && !slices.Contains(invs, x) {
			invs = append(invs, x)
		}
	}
	if err := w.query(ctx, persist.ViewQuery{Invocations: invs}); err != nil {
		return false, err
	}
	hasPython, hasJS := false, false
	for _, e := range w.events {
		hasPython = hasPython || hasCompaction(e)
		hasJS = hasJS || isJSCompacted(e)
	}
	if !hasPython && !hasJS {
		return true, nil // no compaction: the view is the history
	}
	top := w.upTo()
	var ranges []persist.TimeRange
	gap := func(after, before time.Time) {
		if before.After(top) {
			before = top
		}
		if after.IsZero() || after.Before(before) {
			ranges = append(ranges, persist.TimeRange{After: after, Before: before})
		}
	}
	if hasPython {
		// The frontier of the visible plain compactions (all of them are
		// marked, and so is every rewind): the gaps between its ranges.
		visible := markRewinds(w.events, make([]bool, len(w.events)))
		var lo time.Time
		var end int64
		for i, r := range frontier(plainCompactions(w.events, pythonCompactions(w.events), visible, make([]bool, len(w.events)))) {
			if i == 0 || r.start > end {
				gap(lo, time.UnixMicro(r.start))
			}
			if i == 0 || r.end > end {
				end = r.end
				lo = time.UnixMicro(end)
			}
		}
		gap(lo, top)
	}
	if hasJS {
		_, end, known := lastJSCompacted(w.events)
		if !known {
			return true, nil // getActiveEvents keeps every event
		}
		gap(end.Truncate(time.Microsecond), top)
	}
	if len(ranges) > 0 {
		recs, err := w.s.loader.EventsIn(ctx, w.a, ranges)
		if err != nil {
			return false, err
		}
		if err := w.add(recs); err != nil {
			return false, err
		}
	}
	// Each scope's first call with arguments: among the calls of its id.
	var scopes []string
	for _, e := range w.events {
		if sc, ok := isolationScope(e); ok && !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if err := w.query(ctx, persist.ViewQuery{Calls: scopes}); err != nil {
		return false, err
	}
	// The calls of every response read, and the answers to their calls.
	var answered []string
	for _, e := range w.events {
		answered = appendResponseIDs(answered, answeredContent(e))
	}
	if len(answered) == 0 {
		return false, nil
	}
	if err := w.query(ctx, persist.ViewQuery{Calls: answered}); err != nil {
		return false, err
	}
	want := map[string]bool{}
	for _, id := range answered {
		want[id] = true
	}
	var calls []string
	for _, e := range w.events {
		ids := callIDs(e)
		if slices.ContainsFunc(ids, func(id string) bool { return want[id] }) {
			calls = append(calls, ids...)
		}
	}
	return false, w.query(ctx, persist.ViewQuery{Answers: calls})
}

// callIDs is the function call ids of e's content.
func callIDs(e *Event) []string {
	var ids []string
	for _, p := range contentParts(e.Content) {
		if c := p.FunctionCall; c != nil && c.ID != "" {
			ids = append(ids, c.ID)
		}
	}
	return ids
}
