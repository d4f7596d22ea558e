package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/adksession/adksession/cache"
)

// sessionChanges are one session's entries of a batch, in log order.
type sessionChanges struct {
	key     SessionKey
	changes []cache.Change
}

func groupChanges(changes []cache.Change) []*sessionChanges {
	var out []*sessionChanges
	idx := map[SessionKey]*sessionChanges{}
	for _, c := range changes {
		k := SessionKey{AppName: c.App, UserID: c.User, SessionID: c.SID}
		g := idx[k]
		if g == nil {
			g = &sessionChanges{key: k}
			idx[k] = g
			out = append(out, g)
		}
		g.changes = append(g.changes, c)
	}
	return out
}

// repairAppState applies the app deltas of the batch's entries to Redis
// again: a no-op for those their writer applied, the repair for a writer
// that died between its two steps.
func (f *Flusher) repairAppState(ctx context.Context, changes []cache.Change) error {
	for _, c := range changes {
		if c.AppDelta == "" {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.AppDelta), &m); err != nil {
			continue // dead-lettered with its session if the database rejects it
		}
		pairs := make([]cache.Pair, 0, len(m))
		for k, v := range m {
			pairs = append(pairs, cache.Pair{Key: k, Value: string(v)})
		}
		id := cache.AppendChangeID(c.Incarnation, c.User, c.SID, c.EventID)
		if c.Kind == 'c' {
			id = cache.CreateChangeID(c.Incarnation, c.User, c.SID)
		}
		if err := ApplyAppState(ctx, f.db, f.cache, c.App, id, pairs); err != nil {
			return err
		}
	}
	return nil
}

// buildBatch reads what the groups' sessions are now in Redis and makes the
// batch that writes it, with what to record in Redis once it is committed.
func (f *Flusher) buildBatch(ctx context.Context, groups []*sessionChanges) (*Batch, []cache.Flushed, error) {
	b := &Batch{}
	var refs []cache.FlushRef
	var upserts []*sessionChanges
	var marks []cache.Flushed
	apps := map[string]bool{}
	var deleteMarks []int // indexes in marks of the deletes' marks
	for _, g := range groups {
		for _, c := range g.changes {
			if c.AppDelta != "" {
				apps[c.App] = true // also of changes a later delete voids: app state stays
			}
		}
		live := g.changes
		for i := len(g.changes) - 1; i >= 0; i-- {
			if c := g.changes[i]; c.Kind == 'd' {
				b.Deletes = append(b.Deletes, SessionDelete{Key: g.key, Incarnation: c.Incarnation})
				marks = append(marks, cache.Flushed{App: c.App, User: c.User, SID: c.SID, Incarnation: c.Incarnation, Seq: -1, UserRev: -1})
				deleteMarks = append(deleteMarks, len(marks)-1)
				live = g.changes[i+1:]
				break
			}
		}
		if len(live) == 0 {
			continue
		}
		last := live[len(live)-1]
		ref := cache.FlushRef{App: last.App, User: last.User, SID: last.SID, Incarnation: last.Incarnation, MinTs: 1, MaxTs: 0}
		for _, c := range live {
			if c.Kind != 'a' || c.Incarnation != last.Incarnation {
				continue
			}
			if ref.MinTs > ref.MaxTs {
				ref.MinTs, ref.MaxTs = c.Ts, c.Ts
			}
			ref.MinTs, ref.MaxTs = min(ref.MinTs, c.Ts), max(ref.MaxTs, c.Ts)
		}
		refs = append(refs, ref)
		upserts = append(upserts, g)
	}
	reads, err := f.cache.ReadForFlush(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	users := map[[2]string]bool{}
	for i, r := range reads {
		if r.Snap == nil {
			continue // deleted or re-created since: later entries carry it
		}
		ref := refs[i]
		up := SessionUpsert{
			Key: upserts[i].key, Incarnation: ref.Incarnation, Rev: r.Snap.Rev,
			State:      rawState(r.Snap.State),
			CreateTime: time.UnixMicro(r.Snap.CreateTime).UTC(), UpdateTime: time.UnixMicro(r.Snap.UpdateTime).UTC(),
		}
		seq := int64(0)
		for _, e := range r.Events {
			data, err := StorageForm([]byte(e.JSON))
			if err != nil {
				return nil, nil, fmt.Errorf("event %d of session %s: %w", e.Seq, ref.SID, err)
			}
			var head struct {
				ID           string `json:"id"`
				InvocationID string `json:"invocationId"`
			}
			if err := json.Unmarshal([]byte(e.JSON), &head); err != nil {
				return nil, nil, fmt.Errorf("event %d of session %s: %w", e.Seq, ref.SID, err)
			}
			up.Events = append(up.Events, EventRow{Key: up.Key, ID: head.ID, InvocationID: head.InvocationID,
				Timestamp: time.UnixMicro(e.Ts).UTC(), Seq: e.Seq, Data: data})
			seq = max(seq, e.Seq)
		}
		b.Sessions = append(b.Sessions, up)
		userRev := int64(-1)
		if uk := [2]string{ref.App, ref.User}; !users[uk] {
			users[uk] = true
			b.UserStates = append(b.UserStates, StateUpsert{AppName: ref.App, UserID: ref.User, Rev: r.Snap.UserRev,
				State: rawState(r.Snap.User), UpdateTime: up.UpdateTime})
			userRev = r.Snap.UserRev
		}
		marks = append(marks, cache.Flushed{App: ref.App, User: ref.User, SID: ref.SID, Incarnation: ref.Incarnation, Seq: seq, UserRev: userRev})
	}
	// The user state that deleted sessions changed stays (as app state
	// does): write it even when no live session of the user is in the batch.
	for _, i := range deleteMarks {
		m := &marks[i]
		uk := [2]string{m.App, m.User}
		if users[uk] {
			continue
		}
		users[uk] = true
		state, rev, ok, err := f.cache.UserStateRev(ctx, m.App, m.User)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			b.UserStates = append(b.UserStates, StateUpsert{AppName: m.App, UserID: m.User, Rev: rev,
				State: rawState(state), UpdateTime: time.Now().UTC()})
			m.UserRev = rev
		}
	}
	for app := range apps {
		state, rev, ok, err := f.cache.AppStateRev(ctx, app)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			b.AppStates = append(b.AppStates, StateUpsert{AppName: app, Rev: rev, State: rawState(state), UpdateTime: time.Now().UTC()})
		}
	}
	return b, marks, nil
}

func rawState(m map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}
