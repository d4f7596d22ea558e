package loader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

// fakeRedis answers the batch builder's reads from maps, without a server.
// The flusher's other needs (embedded, nil) are not called by buildBatch.
type fakeRedis struct {
	flushCache
	reads map[string]cache.FlushRead // by session id
	users map[string]cache.StateRev  // by user id
	apps  map[string]cache.StateRev
	refs  []cache.FlushRef // what ReadForFlush was asked
}

func (r *fakeRedis) ReadForFlush(_ context.Context, refs []cache.FlushRef) ([]cache.FlushRead, error) {
	r.refs = append(r.refs, refs...)
	out := make([]cache.FlushRead, len(refs))
	for i, ref := range refs {
		out[i] = r.reads[ref.ID]
	}
	return out, nil
}

func (r *fakeRedis) UserStateRev(_ context.Context, _, user string) (cache.StateRev, error) {
	return r.users[user], nil
}

func (r *fakeRedis) AppStateRev(_ context.Context, app string) (cache.StateRev, error) {
	return r.apps[app], nil
}

// TestBuildBatchWithoutRedis: the batch builder, on a fake of what it reads
// of Redis (batchReader): what it asks for, and the batch, marks and dead
// letters it makes of the answers.
func TestBuildBatchWithoutRedis(t *testing.T) {
	const inc, inc2 = 1_000_000, 2_000_000
	ev := func(seq, ts int64, id string) cache.EventRecord {
		return cache.EventRecord{Seq: seq, Ts: ts, ID: id, JSON: `{"id":"` + id + `","invocationId":"i1","author":"user","timestamp":1}`}
	}
	user := cache.StateRev{OK: true, Rev: 3, Dead: -1, State: map[string]string{"u": `"v"`}, Flush: 2}
	rd := &fakeRedis{
		reads: map[string]cache.FlushRead{
			"s1": {Snap: &cache.Snapshot{Incarnation: inc, CreateTime: inc, UpdateTime: 30, State: map[string]string{"k": `1`}},
				Events: []cache.EventRecord{ev(1, 10, "e1"), ev(2, 20, "e2"), {Seq: 3, Ts: 30, ID: "e3", JSON: `[1]`}},
				User:   user, CreateState: `{"k":0}`},
			"s3": {}, // deleted or created again since the log was read
		},
		apps: map[string]cache.StateRev{"app": {OK: true, Rev: 5, Dead: -1, State: map[string]string{"a": `2`}}},
	}
	f := &Flusher{cache: rd}
	changes := []cache.Change{
		{EntryID: "1-0", Kind: base.ChangeCreate, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc},
		{EntryID: "2-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 1, Ts: 10,
			AppDelta: []cache.Pair{{Key: "a", Value: `2`}}, AppOrder: 7, EventID: "e1"},
		{EntryID: "3-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s2"}, Incarnation: inc, Seq: 1, Ts: 15},
		{EntryID: "4-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 2, Ts: 20,
			UserDelta: []cache.Pair{{Key: "carried", Value: `1`}}, EventID: "e2"},
		// Another event at e2's seq and time, which an older copy of s1
		// numbered e2 over, and one after the last the read returned: Redis
		// lost both since (their user: writes are in the user's hash).
		{EntryID: "4-1", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 2, Ts: 20,
			UserDelta: []cache.Pair{{Key: "over", Value: `2`}}, EventID: "lost-over"},
		{EntryID: "6-1", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 4, Ts: 40,
			UserDelta: []cache.Pair{{Key: "after", Value: `4`}}, EventID: "lost-after"},
		{EntryID: "5-0", Kind: base.ChangeDelete, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s2"}, Incarnation: inc},
		{EntryID: "6-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 3, Ts: 30},
		{EntryID: "7-0", Kind: base.ChangeCreate, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s3"}, Incarnation: inc2,
			UserDelta: []cache.Pair{{Key: "u0", Value: `true`}}},
	}
	bad := []cache.DeadLetter{{Change: cache.Change{EntryID: "0-1"}, Unit: cache.DeadEvent, Reason: "unreadable entry"}}
	sb, err := f.buildBatch(context.Background(), 4, changes, bad)
	if err != nil {
		t.Fatal(err)
	}

	// What it read: s1's appends' time range with its create-time state,
	// s3's create; nothing of s2, whose delete ends the batch's changes.
	wantRefs := []cache.FlushRef{
		{SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, MinTs: 10, MaxTs: 40, Create: true},
		{SessionRef: base.SessionRef{App: "app", User: "u", ID: "s3"}, Incarnation: inc2, MinTs: 1, MaxTs: 0, Create: true},
	}
	if !jsonEqual(t, rd.refs, wantRefs) {
		t.Errorf("refs %s, want %s", mustJSON(t, rd.refs), mustJSON(t, wantRefs))
	}
	b := sb.batch
	if len(b.Deletes) != 1 || b.Deletes[0].Key.ID != "s2" || b.Deletes[0].Incarnation != inc {
		t.Errorf("deletes %+v, want s2's", b.Deletes)
	}
	if len(b.Sessions) != 1 {
		t.Fatalf("%d session upserts, want 1 (s1)", len(b.Sessions))
	}
	up := b.Sessions[0]
	var ids []string
	for _, e := range up.Events {
		ids = append(ids, e.ID)
	}
	// e3's JSON is no event: dead-lettered, the row's rev the last seq read.
	if up.Key.ID != "s1" || up.Rev != 3 || len(ids) != 2 || ids[0] != "e1" || ids[1] != "e2" {
		t.Errorf("upsert of %s at rev %d with %v, want s1 at rev 3 with [e1 e2]", up.Key.ID, up.Rev, ids)
	}
	if string(up.CreateState["k"]) != "0" || string(up.State["k"]) != "1" {
		t.Errorf("state %s, create state %s", mustJSON(t, up.State), mustJSON(t, up.CreateState))
	}
	if len(b.Voided) != 1 || b.Voided[0].Key.ID != "s3" {
		t.Errorf("voided %+v, want s3's create (gone since)", b.Voided)
	}
	// The writes no event of the batch carries: the two s1 lost, and s3's
	// create's (e2's is carried by e2).
	var writes []string
	for _, w := range b.UserWrites {
		for k, v := range w.Delta {
			writes = append(writes, fmt.Sprintf("%s %d %s %s=%s", w.Key.ID, w.Seq, w.EventID, k, v))
		}
	}
	if want := []string{"s1 2 lost-over over=2", "s1 4 lost-after after=4", "s3 0  u0=true"}; !slices.Equal(writes, want) {
		t.Errorf("user writes %q, want %q", writes, want)
	}
	if len(b.UserStates) != 1 || b.UserStates[0].Rev != 3 || b.UserStates[0].Flush != 2 {
		t.Errorf("user states %+v, want u at rev 3", b.UserStates)
	}
	if len(b.AppStates) != 1 || b.AppStates[0].Rev != 5 || string(b.AppStates[0].State["a"]) != "2" {
		t.Errorf("app states %+v, want app at rev 5", b.AppStates)
	}

	// Marks: s2 deleted, s1 flushed to seq 3 (e2 its last event written)
	// with the user's revision.
	var marks []string
	for _, m := range sb.marks {
		marks = append(marks, mustJSON(t, map[string]any{"sid": m.ID, "seq": m.Seq, "deleted": m.Deleted, "user": m.UserRev}))
	}
	wantMarks := []string{
		mustJSON(t, map[string]any{"sid": "s2", "seq": -1, "deleted": true, "user": -1}),
		mustJSON(t, map[string]any{"sid": "s1", "seq": 3, "deleted": false, "user": 3}),
	}
	if !jsonEqual(t, marks, wantMarks) {
		t.Errorf("marks %v, want %v", marks, wantMarks)
	}
	// Every entry is acknowledged; the unreadable one and e3 are dead.
	if len(sb.ids) != len(changes)+1 {
		t.Errorf("%d entries acknowledged, want %d", len(sb.ids), len(changes)+1)
	}
	if len(sb.dead) != 2 || sb.dead[0].Change.EntryID != "0-1" || sb.dead[1].Change.EntryID != "6-0" || sb.dead[1].Unit != cache.DeadEvent {
		t.Errorf("dead letters %+v, want the unreadable entry and e3's", sb.dead)
	}
}

// TestBuildBatchReadError: a failed read of Redis fails the batch, which
// writes nothing.
func TestBuildBatchReadError(t *testing.T) {
	f := &Flusher{cache: &failingReader{}}
	_, err := f.buildBatch(context.Background(), 0, []cache.Change{{EntryID: "1-0", Kind: base.ChangeCreate, SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, Incarnation: 1}}, nil)
	if !errors.Is(err, errRead) {
		t.Fatalf("got %v, want the read's error", err)
	}
}

var errRead = errors.New("read failed")

type failingReader struct{ fakeRedis }

func (*failingReader) ReadForFlush(context.Context, []cache.FlushRef) ([]cache.FlushRead, error) {
	return nil, errRead
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	return mustJSON(t, a) == mustJSON(t, b)
}

// TestBuildBatchLogPositions: each event read is placed among the batch's
// writes at the position of its own change-log entry, found by seq and id:
// an older copy in Redis numbers its event over one logged before at the
// same seq (e2 over an entry without an id, a rewind Redis lost), and an
// event logged after the batch read the log (e3) comes after every entry.
// A rebased user applies the writes in that order (simulation seed
// 547085383959: e2 took the first entry's place, and its user: write went
// in before the ones logged before it).
func TestBuildBatchLogPositions(t *testing.T) {
	const inc = 1_000_000
	ev := func(seq, ts int64, id string) cache.EventRecord {
		return cache.EventRecord{Seq: seq, Ts: ts, ID: id, JSON: `{"id":"` + id + `","invocationId":"i1","author":"user","timestamp":1}`}
	}
	rd := &fakeRedis{reads: map[string]cache.FlushRead{
		"s1": {Snap: &cache.Snapshot{Incarnation: inc, CreateTime: inc, UpdateTime: 30},
			Events: []cache.EventRecord{ev(1, 10, "e1"), ev(2, 20, "e2"), ev(3, 30, "e3")},
			User:   cache.StateRev{OK: true, Rev: 3, Dead: -1, Flush: 2}},
	}}
	f := &Flusher{cache: rd}
	changes := []cache.Change{
		{EntryID: "1-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 2, Ts: 20},
		{EntryID: "2-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 1, Ts: 10,
			UserDelta: []cache.Pair{{Key: "k", Value: `1`}}, EventID: "e1"},
		{EntryID: "3-0", Kind: base.ChangeAppend, SessionRef: base.SessionRef{App: "app", User: "u", ID: "s1"}, Incarnation: inc, Seq: 2, Ts: 20,
			UserDelta: []cache.Pair{{Key: "k", Value: `2`}}, EventID: "e2"},
	}
	sb, err := f.buildBatch(context.Background(), 4, changes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.batch.Sessions) != 1 {
		t.Fatalf("%d session upserts, want 1", len(sb.batch.Sessions))
	}
	got := map[string]int{}
	for _, e := range sb.batch.Sessions[0].Events {
		got[e.ID] = e.LogPos
	}
	want := map[string]int{"e1": 1, "e2": 2, "e3": 3}
	if !maps.Equal(got, want) {
		t.Errorf("log positions %v, want %v", got, want)
	}
}
