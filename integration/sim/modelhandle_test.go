package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// TestModelHandleAfterBehindAppend: a handle read from Redis's older copy of
// a session and appended through has never seen the database's newer
// events. Once Redis lets go of the copy (a rebasing flush deletes it) the
// session reads back from the database, and the next append through the
// handle in the default mode is ErrStaleSession: the model must allow it
// (cluster single seed 742397407673, op #175: the model held the handle
// current in both views). The copy's view still finds it current.
func TestModelHandleAfterBehindAppend(t *testing.T) {
	k, d, c := behindClient(7) // the database holds e7, Redis's copy does not

	h := &handle{s: &service.Session{}, inc: 1, rev: 6} // read from the copy (a handle: not AppendTo)
	sent := &service.Event{ID: "e8", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
	c.adoptAppend(&op{}, c.slots[0], h, sent, "e8", 100, time.Now(), true)
	require.Empty(t, d.failed)

	requireStaleToDBOnly(t, d.m.session(k), h, "e7")
}

// requireStaleToDBOnly: the next append through h is stale to the
// database's view of s (the handle never saw missed) and current to the
// copy's.
func requireStaleToDBOnly(t *testing.T, s *mSession, h *handle, missed string) {
	t.Helper()
	next := &service.Event{ID: "next", InvocationID: "inv", Author: "user"}
	db, _ := predict(s, h, next, false)
	view, _ := predict(s.as(s.View), h, next, false)
	require.Equal(t, outcomeNames[outStale], outcomeNames[db], "the database's view: the handle never saw %s", missed)
	require.Equal(t, outcomeNames[outAppend], outcomeNames[view], "the copy's view: the handle is current")
}

// TestModelHandleReadBehind: a read of a window of recent events that
// Redis's older copy and the database's events both end with matches both
// views, and may have come from the copy: the handle follows the copy's
// numbering (readRev), stale to the database once the copy is let go,
// current to the copy (standalone single seed 12266057155, op #299: held at
// the database's numbering, the handle was taken as current after the ADK
// writer's flush had let the copy go).
func TestModelHandleReadBehind(t *testing.T) {
	k, d, c := behindClient(4) // the database holds e4, Redis's copy does not
	h := &handle{s: &service.Session{}, inc: 1, rev: 3}
	for i := range 3 { // appended to the copy
		id := fmt.Sprintf("e%d", i+5)
		sent := &service.Event{ID: id, InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(int64(100 + i)).UTC()}
		c.adoptAppend(&op{}, c.slots[0], h, sent, id, int64(100+i), time.Now(), true)
	}
	require.Empty(t, d.failed)

	s := d.m.session(k)
	views := s.views()
	require.Len(t, views, 2)
	require.Equal(t, ids(views[0][len(views[0])-2:]), ids(views[1][len(views[1])-2:]), "a read of the last 2 events matches both")
	read := &handle{s: &service.Session{}, inc: 1, rev: readRev(views)}
	requireStaleToDBOnly(t, s, read, "e4") // read from the copy
}

// behindClient is a client of a session of n flushed events whose Redis
// copy lacks the last (an RDB restart).
func behindClient(n int) (sessKey, *driver, *client) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	for i := range n {
		d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i)}, nil, nil, nil, time.Now())
	}
	d.m.flushed()
	d.m.copyBehind(k, n-1)
	return k, d, c
}

// TestModelHandleCopyLetGo: an append through a handle of Redis's older
// copy, answered at a time before the copy's last event, went to the
// session read back from the database (a rebasing flush had let the copy
// go; the service brings a handle up to date in the ConcurrentAppends
// mode): the handle follows the database's numbering and is current there
// (standalone single seed 1063226206056, op #316: held at the copy's
// numbering, the next append through it, #352, was wanted ErrStaleSession).
func TestModelHandleCopyLetGo(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	for i := range 7 {
		d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i)}, nil, nil, nil, time.Now())
	}
	d.m.flushed()
	d.m.copyBehind(k, 4)                                              // the copy lacks e5..e7
	d.m.viewAppended(k, &mEvent{ID: "e5", Inv: "inv", Ts: 1000}, nil) // and stored e5 again, late
	h := &handle{s: &service.Session{}, inc: 1, rev: 5}               // at the copy's numbering
	sent := &service.Event{ID: "e8", InvocationID: "inv", Author: "user"}
	c.adoptAppend(&op{}, c.slots[0], h, sent, "e8", 17, time.Now(), true) // after the database's e7, before the copy's e5
	require.Empty(t, d.failed)
	require.Equal(t, int64(8), h.rev, "the handle follows the database's numbering")

	s := d.m.session(k)
	next := &service.Event{ID: "e9", InvocationID: "inv", Author: "user"}
	db, _ := predict(s, h, next, false)
	require.Equal(t, outcomeNames[outAppend], outcomeNames[db], "the database's view: the handle is current")
}

// TestModelDupFromCopy: a duplicate delivery answered by Redis's older copy
// (its event at its time) leaves the handle at the copy's numbering: the
// database holds an ADK event the copy lacks, so the same event is one
// further there (cluster concurrent seed 843168760264, #105: moved to the
// database's numbering, the handle was current in both views at #113, and
// the service, whose rebasing flush had let the copy go, answered it
// ErrStaleSession).
func TestModelDupFromCopy(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	for i := range 9 { // e9 is ADK's: the copy lacks it
		d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i)}, nil, nil, nil, time.Now())
	}
	d.m.flushed()
	d.m.copyBehind(k, 8)
	// e10, appended to the copy at 18 (after its e8), is at 19 in the database.
	sent := &service.Event{ID: "e10", InvocationID: "inv", Author: "user"}
	e10 := storedForm(sent)
	e10.Ts = 18
	d.m.appended(k, e10, nil, nil, nil, time.Now())
	s := d.m.session(k)
	require.Equal(t, int64(19), s.event("e10").Ts)
	require.Equal(t, int64(10), s.rev())
	require.Len(t, s.View, 9)

	h := &handle{s: &service.Session{}, inc: 1, rev: 9} // read from the copy
	want, had := predict(s, h, sent, false)
	require.Equal(t, outcomeNames[outDup], outcomeNames[want])
	answer := &service.Event{ID: "e10", Timestamp: time.UnixMicro(18).UTC()} // the copy's e10
	p, ok := c.answered(&op{}, c.alternatives(k, h, sent, want, had, false), nil, "e10", answer)
	require.True(t, ok)
	require.Equal(t, outcomeNames[outDup], outcomeNames[p.want])
	c.record(&op{}, c.slots[0], h, p, sent, answer, time.Now())
	require.Empty(t, d.failed)
	require.Equal(t, int64(9), h.rev, "the handle stays at the copy's numbering")

	requireStaleToDBOnly(t, s, h, "e9")
}

// TestModelCopyEvicted: once Redis loses a key an older copy of a session
// is read back for, the copy goes at the next read: a handle read back from
// the database and appended through follows the database's numbering
// (standalone single seed 331527015200: the copy's session hash and events
// evicted at #75, the handle of #78 held at the copy's numbering and #99
// wanted stale). Until that read, the copy's view stays allowed (a list may
// still show its update time: seed 1046909943327, #323).
func TestModelCopyEvicted(t *testing.T) {
	k, d, c := behindClient(3) // the database holds e3, Redis's copy does not
	d.m.copyGone(k, true)      // its event ids: a read still answers the copy
	require.False(t, d.m.readBack(k, false), "a read does not count the event ids")
	d.m.copyGone(k, false) // its session hash
	s := d.m.session(k)
	require.True(t, s.Behind, "until the next call, the copy's view stays")
	require.Len(t, s.views(), 2)

	h := &handle{s: &service.Session{}, inc: 1, rev: 3} // read back from the database
	sent := &service.Event{ID: "e4", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
	c.adoptAppend(&op{}, c.slots[0], h, sent, "e4", 100, time.Now(), true)
	require.Empty(t, d.failed)
	require.Equal(t, int64(4), h.rev, "the database's numbering")
	s = d.m.session(k)
	require.False(t, s.Behind, "the append read the session back: the copy is gone")
	next := &service.Event{ID: "e5", InvocationID: "inv", Author: "user"}
	db, _ := predict(s, h, next, false)
	require.Equal(t, outcomeNames[outAppend], outcomeNames[db])
}

// redisNumberings are the two numberings Redis's m:rev can say an answer
// followed when the database holds e7 and Redis's copy does not (the
// behindClient(7) of the tests below), each with the handle's revision
// after it.
var redisNumberings = []struct {
	name     string
	redisRev int64
	want     int64
}{
	{"the database's numbering", 8, 8},
	{"the copy's numbering", 7, 7},
}

// TestModelHandleAtRedisRev: an append through a handle of Redis's older
// copy, answered after the last event of both views, follows the numbering
// Redis stored it at, which Redis tells (cluster single seed 234739287161,
// #410: the database's; held at the copy's, the handle was taken as stale
// at #429).
func TestModelHandleAtRedisRev(t *testing.T) {
	for _, c := range redisNumberings {
		t.Run(c.name, func(t *testing.T) {
			_, d, cl := behindClient(7) // the database holds e7, Redis's copy does not
			d.revs = func(sessKey) (int64, bool) { return c.redisRev, true }
			h := &handle{s: &service.Session{}, inc: 1, rev: 6}
			sent := &service.Event{ID: "e8", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
			cl.adoptAppend(&op{}, cl.slots[0], h, sent, "e8", 100, time.Now(), true) // after both views' last
			require.Empty(t, d.failed)
			require.Equal(t, c.want, h.rev)
		})
	}
}

// TestModelDupInBothViews: a duplicate of an event both views hold at the
// same time follows the numbering Redis answered it at, which Redis tells
// (standalone concurrent seed 613387936541, #72: the copy's; moved to the
// database's, the handle was taken as current at #80).
func TestModelDupInBothViews(t *testing.T) {
	for _, c := range redisNumberings {
		t.Run(c.name, func(t *testing.T) {
			k, d, cl := behindClient(7) // the database holds e7, Redis's copy does not
			sent := &service.Event{ID: "e8", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
			e8 := storedForm(sent)
			e8.Ts, e8.Sent = 100, sent.Clone()
			d.m.appended(k, e8, nil, nil, nil, time.Now()) // after both views' last: the same time in each
			s := d.m.session(k)
			require.Equal(t, int64(100), s.event("e8").Ts)

			d.revs = func(sessKey) (int64, bool) { return c.redisRev, true }
			// Read from the copy after e8 (its 7th), or from the database
			// before it: the answer cannot tell.
			h := &handle{s: &service.Session{}, inc: 1, rev: 7}
			want, had := predict(s, h, sent, false)
			require.Equal(t, outcomeNames[outDup], outcomeNames[want])
			answer := &service.Event{ID: "e8", Timestamp: time.UnixMicro(100).UTC()}
			p, ok := cl.answered(&op{}, cl.alternatives(k, h, sent, want, had, false), nil, "e8", answer)
			require.True(t, ok)
			cl.record(&op{}, cl.slots[0], h, p, sent, answer, time.Now())
			require.Empty(t, d.failed)
			require.Equal(t, c.want, h.rev)
		})
	}
}

// TestModelHandleOfCopyStale: a handle that stored an event again in
// Redis's older copy (the database keeps its own under that id) may, once
// the copy is gone, be at the database's revision with another last event:
// the service refuses it as stale, and the model allows that answer as well
// as the append (standalone single seed 371616012458, #128: the model wanted
// the append alone). A handle read from the database's session is not
// allowed it.
func TestModelHandleOfCopyStale(t *testing.T) {
	k, d, c := behindClient(3) // the database holds e3, Redis's copy does not
	retry := &service.Event{ID: "e3", InvocationID: "inv", Author: "user"}
	h := &handle{s: &service.Session{}, inc: 1, rev: 2} // read from the copy
	answer := &service.Event{ID: "e3", Timestamp: time.UnixMicro(100).UTC()}
	c.storedOverDB(&op{}, k, h, retry, answer) // the copy's seq 3
	require.True(t, h.ofCopy)
	require.EqualValues(t, 3, h.rev)
	d.m.allCopiesGone() // a FLUSHALL: Redis reads the database's session back

	next := &service.Event{ID: "e4", InvocationID: "inv", Author: "user"}
	s := d.m.session(k)
	want, had := predict(s, h, next, false)
	require.Equal(t, outcomeNames[outAppend], outcomeNames[want], "at the database's revision")
	var names []string
	for _, p := range c.alternatives(k, h, next, want, had, false) {
		names = append(names, outcomeNames[p.want])
	}
	require.Contains(t, names, outcomeNames[outStale], "another last event at that revision")

	fresh := &handle{s: &service.Session{}, inc: 1, rev: 3}
	for _, p := range c.alternatives(k, fresh, next, want, had, false) {
		require.NotEqual(t, outcomeNames[outStale], outcomeNames[p.want], "a handle of the database's session")
	}
}

// TestModelHandleSawConflict: a handle read from Redis's older copy while
// the copy holds an event the flush dead-letters (another event under the
// id of the database's e5, stored through another handle) has that event's
// delta in its state, and lacks e5's. Once the copy is gone, its revision
// and last event can be the stored ones (its appends moved after the
// database's events), so the service lets it append: its state is not
// checked (standalone single seed 923431865797, #338: "session state of the
// handle after the append").
func TestModelHandleSawConflict(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	for i := range 5 {
		d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i), Delta: map[string]any{"k": i + 1}},
			nil, nil, nil, time.Now())
	}
	d.m.flushed()
	d.m.copyBehind(k, 4) // Redis's copy lacks e5

	reuse := &service.Event{ID: "e5", InvocationID: "inv-other", Author: "user"}
	other := &handle{s: &service.Session{}, inc: 1, rev: 4}
	c.storedOverDB(&op{IDMode: idReuse}, k, other, reuse, &service.Event{ID: "e5", Timestamp: time.UnixMicro(100).UTC()})
	require.True(t, other.conflicted)

	s := d.m.session(k)
	h := d.readHandle(k, s, &service.Session{}, [][]*mEvent{s.View}) // its state: not the database's
	require.True(t, h.conflicted)
	for i, ts := range []int64{101, 102, 103} { // one while the copy is Redis's, two after it is gone
		if i == 1 {
			d.m.allCopiesGone()
		}
		id := fmt.Sprint("n", i)
		sent := &service.Event{ID: id, InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(ts).UTC()}
		c.adoptAppend(&op{}, c.slots[0], h, sent, id, ts, time.Now(), true)
		require.Empty(t, d.failed, "append %s", id)
	}
	fresh := d.readHandle(k, d.m.session(k), &service.Session{}, [][]*mEvent{d.m.session(k).Events})
	require.False(t, fresh.conflicted, "read from the database's session")
}
