package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// TestModelStoredAgainOverDB: a retry of an event the database holds, sent
// without a sign that the caller read a newer copy (AppendTo without
// IfLastUpdate), is stored again by Redis's older copy, which lacks it
// (kept, docs/design.md, "Ids unknown to an older copy"), and its app: step
// runs again as a new change when Redis lost the record of the first one:
// its values win over a write acknowledged since (standalone single seed
// 942321632390, op #268: the event asked for a time after the copy's last
// event, so the answer was the stored id and time, which the model took for
// a duplicate that writes nothing). Its app: and user: keys may then read as
// the event's values or as before, until written again; the copy's view
// holds the event.
func TestModelStoredAgainOverDB(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	first := &service.Event{ID: "e1", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC(),
		Actions: service.EventActions{StateDelta: map[string]any{"app:c0.z": "old", "user:c0.u": "old", "k": "old"}}}
	e1 := storedForm(first)
	e1.Ts, e1.Sent = 100, first.Clone()
	d.m.appended(k, e1, nil, map[string]any{"c0.u": "old"}, map[string]any{"c0.z": "old"}, time.Now())
	d.m.flushed()
	d.m.copyBehind(k, 0) // an RDB restart: the copy lacks e1, the database holds it
	// Written again after the restart (through another session): exact again.
	d.m.applyScoped(k, map[string]any{"c0.u": "new"}, map[string]any{"c0.z": "new"})

	h := &handle{inc: 1} // AppendTo
	retry := first.Clone()
	s := d.m.session(k)
	want, had := predict(s, h, retry, false)
	require.Equal(t, outcomeNames[outDup], outcomeNames[want])
	// Stored again by the copy at the time asked for: the stored id and time.
	got := retry.Clone()
	p, ok := c.answered(&op{}, c.alternatives(k, h, retry, want, had, false), nil, retry.ID, got)
	require.True(t, ok)
	require.True(t, p.viewOnly, "the answer may be the copy's new event")
	d.holds = func(sessKey, string) (bool, int64) { return true, 1 } // Redis's copy holds it, at its next seq
	c.record(&op{}, c.slots[0], h, p, retry, got, time.Now())
	require.Empty(t, d.failed)
	require.EqualValues(t, 1, d.knownDup.Load())
	require.Empty(t, d.conflicts, "a retry: no dead letter expected")

	s = d.m.session(k)
	require.Equal(t, []string{"e1"}, ids(s.View), "the copy's view holds the event stored again")
	for _, v := range []string{"new", "old"} {
		read := map[string]any{"app:c0.z": v, "user:c0.u": v}
		require.Empty(t, d.m.stateDiff(k, withSession(s, read), 0, true, ""), "app and user keys may read as %q", v)
	}
	require.NotEmpty(t, d.m.stateDiff(k, withSession(s, map[string]any{"app:c0.z": "other", "user:c0.u": "new"}), 0, true, ""),
		"no other value")

	d.m.applyScoped(k, nil, map[string]any{"c0.z": "newer"})
	require.NotEmpty(t, d.m.stateDiff(k, withSession(s, map[string]any{"app:c0.z": "old", "user:c0.u": "new"}), 0, true, ""),
		"written again: exact")
}

// TestModelOtherContentOverDB: the id of an event the database holds, sent
// with other content through Redis's older copy, which lacks it: the copy
// stores it, and the flush keeps the database's event and dead-letters this
// one, a conflict; the checkpoint expects exactly that letter
// (takeConflicts). Whatever the id mode: an idReuse of the session's own
// id, or an idForeign id (another session's) that an earlier foreign append
// gave this session too (cluster single seed 921572058172, op #193:
// ev-c0-118, stored in the session by #165; the checkpoint failed on the
// letter the model expected for idReuse only). A retry of the database's
// own event is no conflict: TestModelStoredAgainOverDB.
func TestModelOtherContentOverDB(t *testing.T) {
	for name, mode := range map[string]idMode{"reuse": idReuse, "foreign": idForeign} {
		t.Run(name, func(t *testing.T) {
			k := sessKey{App: "a", User: "u", SID: "s"}
			d, c := modelClient(k)
			d.m.created(k, 1, nil)
			first := &service.Event{ID: "e1", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
			e1 := storedForm(first)
			e1.Ts, e1.Sent = 100, first.Clone()
			d.m.appended(k, e1, nil, nil, nil, time.Now())
			d.m.flushed()
			d.m.copyBehind(k, 0)

			h := &handle{inc: 1}
			other := &service.Event{ID: "e1", InvocationID: "inv-other", Author: "model"}
			want, had := predict(d.m.session(k), h, other, false)
			require.Equal(t, outcomeNames[outExists], outcomeNames[want])
			got := other.Clone()
			got.Timestamp = time.UnixMicro(200).UTC()
			p, ok := c.answered(&op{}, c.alternatives(k, h, other, want, had, false), nil, other.ID, got)
			require.True(t, ok)
			require.True(t, p.viewOnly, "stored by the copy only")
			c.record(&op{IDMode: mode}, c.slots[0], h, p, other, got, time.Now())
			require.Empty(t, d.failed)
			require.EqualValues(t, 1, d.knownDup.Load())
			require.Equal(t, map[sessKey]map[string]bool{k: {"e1": true}}, d.conflicts, "its dead letter is expected")
		})
	}
}

// TestModelRetryLookedUpInDatabase: the same answer (the stored id and
// time) comes when Redis's older copy, lacking the event, has the id
// looked up in the database instead of storing it again: append.lua's {-9}
// for an id that is not among the cached events of a copy whose older
// events are in the database only (the simulation caches 6 events, and a
// cold read put back the newest 6 of 7). Nothing is written then: the copy
// keeps its last update time and state, which a listing may show, and the
// event's keys read exactly. Standalone single seed 227977846135: the
// model took #219's answer for the copy's new event, and the app listing
// #222, which showed the copy as it was (the update time of its last
// event, 1 µs before the event's, and the state without its keys), failed.
func TestModelRetryLookedUpInDatabase(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			k := sessKey{App: "a", User: "u", SID: "s"}
			d, c := modelClient(k)
			d.m.created(k, 1, map[string]any{"k": "initial"})
			var last *service.Event
			for i := range 3 {
				v := fmt.Sprintf("v%d", i+1)
				last = &service.Event{ID: fmt.Sprintf("e%d", i+1), InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(int64(100 + i)).UTC(),
					Actions: service.EventActions{StateDelta: map[string]any{"k": v, "app:c0.z": v}}}
				e := storedForm(last)
				e.Ts, e.Sent = int64(100+i), last.Clone()
				d.m.appended(k, e, nil, nil, map[string]any{"c0.z": v}, time.Now())
			}
			d.m.flushed()
			d.m.copyBehind(k, 2) // the cold read of an in-flight fault: the batch with e3 committed after it
			d.holds = func(sessKey, string) (bool, int64) { return held, 3 }

			h := &handle{s: &service.Session{}, inc: 1, rev: 2} // read from the copy
			retry := last.Clone()
			want, had := predict(d.m.session(k), h, retry, false)
			require.Equal(t, outcomeNames[outDup], outcomeNames[want])
			got := retry.Clone() // the answer, either way: e3's id and time
			p, ok := c.answered(&op{}, c.alternatives(k, h, retry, want, had, false), nil, retry.ID, got)
			require.True(t, ok)
			c.record(&op{}, c.slots[0], h, p, retry, got, time.Now())
			require.Empty(t, d.failed)

			s := d.m.session(k)
			if held {
				require.Equal(t, []string{"e1", "e2", "e3"}, ids(s.View), "stored again: the copy's view holds it")
				require.EqualValues(t, 3, h.rev, "the handle follows the copy")
				require.EqualValues(t, 1, d.knownDup.Load())
				return
			}
			require.Equal(t, []string{"e1", "e2"}, ids(s.View), "looked up in the database: the copy as it was")
			require.EqualValues(t, 2, h.rev, "the handle as it was")
			require.Zero(t, d.knownDup.Load())
			require.EqualValues(t, 1, d.dbDup.Load())
			// A listing may show the copy: e2's time, the state without e3's session key.
			require.EqualValues(t, 101, s.as(s.View).updateTime())
			listed := d.m.merged(k, s.View)
			require.Equal(t, "v2", listed["k"])
			require.Empty(t, d.m.stateDiff(k, listed, -1, true, ""))
			// Nothing was stored again: e3's app: key reads exactly.
			listed["app:c0.z"] = "v2"
			require.NotEmpty(t, d.m.stateDiff(k, listed, -1, true, ""), "e3's app: key is not loose")
		})
	}
}

// modelClient is a driver with a model and no servers, and a client with
// one slot, session k: for the model's tests.
func modelClient(k sessKey) (*driver, *client) {
	d := &driver{m: newModel(), hist: newHistory(), stopCh: make(chan struct{})}
	return d, &client{d: d, slots: []*slot{{key: k}}}
}

// withSession is read with the session state of s's database view.
func withSession(s *mSession, read map[string]any) map[string]any {
	out := s.state()
	for k, v := range read {
		out[k] = v
	}
	return out
}

func ids(evs []*mEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// TestModelSharedAfterStoredAgain: a shared session's older copy stores an
// event the database holds again (at 101, after the database's last event
// at 100); the next event, asked for an older time, is stamped after the
// copy's last event (102). The database keeps its own event, so the stored
// history goes 100, 102: the checkpoint allows that gap, and only that one
// (standalone single seed 762529296100, checkpoint 4: it wanted 101).
func TestModelSharedAfterStoredAgain(t *testing.T) {
	k := sessKey{App: "a", User: "shared", SID: "s"}
	d, _ := modelClient(k)
	d.m.created(k, 1, nil)
	d.m.storedAgain(k, 101, nil, nil)
	s := d.m.session(k)
	e := &mEvent{ID: "e2", Req: 50}
	require.Empty(t, s.sharedStamp(e, 102, 100, false), "after the event stored again")
	require.Empty(t, s.sharedStamp(e, 101, 100, false), "after the database's last event")
	require.NotEmpty(t, s.sharedStamp(e, 103, 100, false), "no other time")
	require.NotEmpty(t, s.sharedStamp(&mEvent{ID: "e3", Req: 50}, 102, 102, false), "a time stored again before the previous event does not count")
	require.Empty(t, s.sharedStamp(&mEvent{ID: "e4", Req: 200}, 200, 100, false), "a later time asked for is kept")
}

// TestModelDupAfterCopyLetGo: a retry, through a handle read from Redis's
// older copy, of an event the database holds is answered with the
// database's id and time three ways: the copy stored it again (at its next
// seq), had it looked up in the database (Redis lacks it), or was let go
// before the append (a rebasing flush, then a read that put back the
// database's session), so that Redis answered the database's event, at the
// database's seq, as a duplicate; the service then brings the handle along
// by it, on a concurrent service to the database's numbering. Standalone
// single seed 689124091095, #337: the model took the third for the first,
// held the handle at the copy's numbering, and wanted ErrStaleSession at
// #371, where the service appended.
func TestModelDupAfterCopyLetGo(t *testing.T) {
	for _, tc := range []struct {
		name             string
		held             bool
		seq              int64
		view, rev, known int
	}{
		{name: "stored again", held: true, seq: 3, view: 3, rev: 3, known: 1},
		{name: "looked up", view: 2, rev: 2},
		{name: "copy let go", held: true, seq: 4, view: 2, rev: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := sessKey{App: "a", User: "u", SID: "s"}
			d, c := modelClient(k)
			d.m.created(k, 1, nil)
			var last *service.Event
			for i := range 4 {
				last = &service.Event{ID: fmt.Sprintf("e%d", i+1), InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(int64(100 + i)).UTC()}
				e := storedForm(last)
				e.Ts, e.Sent = int64(100+i), last.Clone()
				d.m.appended(k, e, nil, nil, nil, time.Now())
			}
			d.m.flushed()
			d.m.copyBehind(k, 2)
			d.holds = func(sessKey, string) (bool, int64) { return tc.held, tc.seq }

			h := &handle{s: &service.Session{}, inc: 1, rev: 2} // read from the copy
			retry := last.Clone()
			o := &op{Svc: 1} // a ConcurrentAppends service
			want, had := predict(d.m.session(k), h, retry, true)
			require.Equal(t, outcomeNames[outDup], outcomeNames[want])
			got := retry.Clone() // the answer, every way: e4's id and time
			p, ok := c.answered(o, c.alternatives(k, h, retry, want, had, true), nil, retry.ID, got)
			require.True(t, ok)
			c.record(o, c.slots[0], h, p, retry, got, time.Now())
			require.Empty(t, d.failed)
			require.Len(t, d.m.session(k).View, tc.view)
			require.EqualValues(t, tc.rev, h.rev, "the handle's numbering")
			require.EqualValues(t, tc.known, d.knownDup.Load())
		})
	}
}
