package cache

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/adksession/adksession/cache/base"
)

// The Go side of Store on miniredis: argument building, reply parsing and
// the mapping of script codes to errors. What the scripts do is tested on
// real Redis (integration/); miniredis runs another Lua.

// newMiniStore returns a Store over a fresh miniredis, with its scripts
// loaded.
func newMiniStore(t *testing.T, durable bool) (*Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	keys, err := NewKeys("unit:", 8)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, Options{Keys: keys, Durable: durable})
	if err := s.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, m
}

// appendArgs is an append of event id through a handle at rev.
func appendArgs(sid, id string, rev, inc, ts int64, pairs ...Pair) AppendArgs {
	return AppendArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: sid}, HandleRev: rev, Incarnation: inc, Ts: ts, InvocationID: "i",
		EventID: id, EventPre: `{"id":"` + id + `","timestamp":`, EventPost: `}`, Delta: StateDelta{Session: pairs}}
}

func TestStoreCreateGetAppend(t *testing.T) {
	ctx := context.Background()
	s, _ := newMiniStore(t, false)
	create := CreateArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, CreateTime: 1_000_000,
		Delta: StateDelta{Session: []Pair{{"k", `"v"`}}, User: []Pair{{"n", `1`}}}}
	if err := s.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, create); !errors.Is(err, base.ErrAlreadyExists) {
		t.Fatalf("second create: got %v, want base.ErrAlreadyExists", err)
	}
	snap, err := s.Get(ctx, GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Incarnation != 1_000_000 || snap.Rev != 0 || snap.State["k"] != `"v"` || snap.User["n"] != `1` || len(snap.Events) != 0 {
		t.Fatalf("snapshot after create: %+v", snap)
	}

	res, err := s.Append(ctx, appendArgs("s", "e1", 0, snap.Incarnation, 2_000_000, Pair{"k", `"w"`}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != 1 || res.Ts != 2_000_000 || res.Incarnation != 1_000_000 {
		t.Fatalf("append result: %+v", res)
	}
	// Through the handle that has not seen e1: stale, nothing written.
	_, err = s.Append(ctx, appendArgs("s", "e2", 0, snap.Incarnation, 3_000_000))
	if !errors.Is(err, base.ErrStaleSession) {
		t.Fatalf("append through an old handle: got %v, want base.ErrStaleSession", err)
	}
	// An id the session holds: the stored event comes back.
	var dup *DuplicateEventError
	if _, err = s.Append(ctx, appendArgs("s", "e1", 1, snap.Incarnation, 4_000_000)); !errors.As(err, &dup) || dup.Stored == nil || dup.Stored.Seq != 1 {
		t.Fatalf("append of a known id: got %v (%+v), want the stored event", err, dup)
	}
	got, err := s.Get(ctx, GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Rev != 1 || len(got.Events) != 1 || got.Events[0].Seq != 1 || got.State["k"] != `"w"` || got.UpdateTime != 2_000_000 {
		t.Fatalf("snapshot after one append: %+v", got)
	}
	if want := `{"id":"e1","timestamp":2.000000}`; got.Events[0].JSON != want {
		t.Fatalf("stored JSON %s, want %s (the script writes the stored time)", got.Events[0].JSON, want)
	}
}

func TestStoreMissingAndDeleted(t *testing.T) {
	ctx := context.Background()
	s, _ := newMiniStore(t, true)
	if _, err := s.Get(ctx, GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "none"}, After: -1}); !errors.Is(err, ErrNotCached) {
		t.Fatalf("get of an unknown session: got %v, want ErrNotCached", err)
	}
	if _, err := s.Append(ctx, appendArgs("none", "e1", 0, 1, 2_000_000)); !errors.Is(err, ErrNotCached) {
		t.Fatalf("append to an unknown session: got %v, want ErrNotCached", err)
	}
	// With a database, a user hash Redis lacks may have been evicted: the
	// caller loads it first.
	create := CreateArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, CreateTime: 1_000_000}
	if err := s.Create(ctx, create); !errors.Is(err, ErrUserNotCached) {
		t.Fatalf("create without the user's state: got %v, want ErrUserNotCached", err)
	}
	guard, err := s.ReadGuard(ctx, base.SessionRef{App: "a", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.HydrateUser(ctx, "a", "u", 0, 0, nil, time.Hour, guard); err != nil {
		t.Fatal(err)
	}
	// And a session index that is not complete may lack a session Redis
	// evicted: the caller completes it first.
	if err := s.Create(ctx, create); !errors.Is(err, ErrUserNotCached) {
		t.Fatalf("create with an incomplete session index: got %v, want ErrUserNotCached", err)
	}
	if err := s.RebuildUserIndex(ctx, "a", "u", nil, time.Hour, guard); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	removed, err := s.Delete(ctx, base.SessionRef{App: "a", User: "u", ID: "s"})
	if err != nil || !removed {
		t.Fatalf("delete: removed %v, err %v", removed, err)
	}
	// With a database the delete leaves a tombstone until it is flushed.
	if _, err := s.Get(ctx, GetArgs{SessionRef: base.SessionRef{App: "a", User: "u", ID: "s"}, After: -1}); !errors.Is(err, ErrDeleted) {
		t.Fatalf("get of a deleted session: got %v, want ErrDeleted", err)
	}
}

// The append asks the script to vouch for a caller's event id (ARGV[13])
// only when a database backs the store: without one there is none to have
// checked, and the script need not read m:first for it.
func TestAppendChecksIDsOnlyWithADatabase(t *testing.T) {
	keys, err := NewKeys("unit:", 8)
	if err != nil {
		t.Fatal(err)
	}
	a := appendArgs("s", "e1", 1, 1, 10)
	a.CheckID = true
	for _, durable := range []bool{false, true} {
		_, line := NewStore(nil, Options{Keys: keys, Durable: durable}).appendCommand(a)
		var got string
		for i, v := range line {
			if p, ok := v.(*string); ok && *p == "e1" {
				got = *line[i+1].(*string)
			}
		}
		want := map[bool]string{false: "0", true: "1"}[durable]
		if got != want {
			t.Errorf("durable %v: ARGV[13] = %q, want %q", durable, got, want)
		}
	}
}
