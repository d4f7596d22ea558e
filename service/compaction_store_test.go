package service

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/lua"
)

// TestCompactedViewThroughTheStore runs the property's random histories
// (TestCompactedViewProperty, both forms) through the real store: appended
// one by one through AppendEvent, then read with Get{Compacted: true} with
// Redis holding the whole session (the compaction index's read), with Redis
// holding only the newest 3 events (MaxCachedEvents, after the flush: the
// index's read, the older part from the database), with Redis holding none of
// it (a cold read: the older part through the database's indexes, no index
// built in Redis), again (the same walk), and of a fork of the whole
// session (whose first read builds its index, the same again). Every time
// the view is exactly CompactedView of the history, and ADK's processing of
// it equals that of the history (the property's checkers). Of the warm read
// it also checks what the index gives Redis's script: events of the
// history, in order, a view themselves (the checkers accept them), fewer
// than the history's overall.
//
// It runs on Postgres and on SQLite (migration 007's call-id table): on
// both, most cold reads walk the database's indexes.
func TestCompactedViewThroughTheStore(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"postgres", "sqlite"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			testCompactedViewThroughTheStore(t, db)
		})
	}
}

func testCompactedViewThroughTheStore(t *testing.T, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "adksession.db")
	if db == "postgres" {
		dbURL = testenv.FreshDatabase(t)
	}
	svc := openWithDatabaseAt(ctx, t, "cview-", Config{MaxCachedEvents: 3, DisableFlusher: true}, dbURL)
	require.True(t, svc.loader.ViewIndexed(), "%s: a cold compacted Get walks the database's indexes", db)
	flusher := svc.NewFlusher(nil)
	flush := func() { t.Helper(); drain(ctx, t, svc, flusher) }

	indexed := func(sid, why string) {
		t.Helper()
		snap, err := svc.cache.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: sid}, After: -1, Compacted: true})
		require.NoError(t, err)
		require.True(t, snap.Indexed, "%s %s: the view is read from the index", sid, why)
	}
	// indexOf is the compaction index of session sid (the x* fields of its
	// undo hash).
	indexOf := func(sid string) map[string]string {
		t.Helper()
		h, err := svc.rdb.HGetAll(ctx, svc.cache.Keys().Session("app", "u", sid).Undo).Result()
		require.NoError(t, err)
		for f := range h {
			if !strings.HasPrefix(f, "x") {
				delete(h, f)
			}
		}
		return h
	}
	histories := max(*compactionHistories/5, 10)
	for _, js := range []bool{false, true} {
		form := map[bool]string{false: "python", true: "js"}[js]
		t.Run(form, func(t *testing.T) {
			var events, read, kept, walked int
			for seed := int64(1); seed <= int64(histories); seed++ {
				h := readHistory(t, testenv.NewHistoryGen(seed, js).History())
				sid := fmt.Sprintf("%s-%d", form, seed)
				byID := map[string]*Event{}
				for _, e := range h {
					byID[e.ID] = e
				}
				// mapped is the history's events with the ids of got, in got's
				// order: what the checkers compare (they match events by identity).
				mapped := func(why string, got []*Event) []*Event {
					t.Helper()
					out := make([]*Event, len(got))
					for i, e := range got {
						out[i] = byID[e.ID]
						require.NotNil(t, out[i], "seed %d %s: event %s is not of the history", seed, why, e.ID)
						require.True(t, e.Timestamp.Equal(out[i].Timestamp), "seed %d %s: event %s's time", seed, why, e.ID)
					}
					return out
				}
				accepts := func(why string, view []*Event) {
					t.Helper()
					var problem string
					if js {
						problem = checkJSView(h, view)
					} else {
						var leading int
						problem = checkPythonView(h, view, &leading)
					}
					require.Empty(t, problem, "seed %d %s\nhistory:\n%s", seed, why, describe(h))
				}
				want := CompactedView(h)
				var checkSession func(sid, why string)
				check := func(why string) {
					t.Helper()
					checkSession(sid, why)
				}
				checkSession = func(sid, why string) {
					t.Helper()
					resp, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: sid, Compacted: true})
					require.NoError(t, err, why)
					got := mapped(why, slices.Collect(resp.Session.Events().All()))
					require.Equal(t, ids(want), ids(got), "seed %d %s: CompactedView of the history", seed, why)
					accepts(why, got)
				}

				appendCopies(ctx, t, svc, sid, h)

				// Warm: what the index gives the script.
				snap, err := svc.cache.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: sid}, After: -1, Compacted: true})
				require.NoError(t, err)
				require.True(t, snap.Indexed, "seed %d: the view is read from the index", seed)
				decoded, err := decodeEvents(snap.Events)
				require.NoError(t, err)
				superset := mapped("index read", decoded)
				positions := make([]int, len(superset))
				for i, e := range superset {
					positions[i] = slices.Index(h, e)
				}
				require.True(t, slices.IsSorted(positions), "seed %d: the index read is in history order", seed)
				require.Len(t, slices.Compact(slices.Clone(positions)), len(positions), "seed %d: no event twice", seed)
				require.Equal(t, ids(want), ids(CompactedView(superset)), "seed %d: CompactedView of the index read", seed)
				accepts("index read", superset)
				check("warm")

				flush()
				snap, err = svc.cache.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: sid}, After: -1, Compacted: true})
				require.NoError(t, err)
				require.Greater(t, snap.First, int64(1), "seed %d: Redis holds only the newest events", seed)
				require.True(t, snap.Indexed, "seed %d: the view is read from the index, the older part from the database", seed)
				check("newest events cached")

				built := indexOf(sid)
				k := svc.cache.Keys().Session("app", "u", sid)
				require.NoError(t, svc.rdb.Del(ctx, append(k.Owned(), k.Session)...).Err())
				check("cold")
				if readsWhole(h) {
					// The view is the history: the cold read read it whole and
					// built the index, the one the appends had built.
					require.Equal(t, built, indexOf(sid), "seed %d: the index built from the history", seed)
					indexed(sid, "after the cold read")
				} else {
					// The cold read walked the database's indexes
					// (viewFromDatabase) and asked for the index to be built
					// in the background, from the whole history: the one
					// the appends had built.
					svc.indexBuilds.life.Wait()
					require.Equal(t, built, indexOf(sid), "seed %d: the index built after the walk", seed)
					indexed(sid, "after the cold read's background build")
					walked++
				}
				check("cold again")

				// A fork of the whole session gets its index from its first
				// compacted read.
				fork := sid + "-fork"
				_, err = svc.Fork(ctx, &ForkRequest{AppName: "app", UserID: "u", SessionID: sid, NewSessionID: fork})
				require.NoError(t, err)
				checkSession(fork, "fork")
				require.Equal(t, built, indexOf(fork), "seed %d: the fork's index", seed)
				indexed(fork, "after its first read")
				checkSession(fork, "fork again")

				events += len(h)
				read += len(superset)
				kept += len(want)
			}
			t.Logf("%s: %d histories, %d events; the index reads %d, the view keeps %d; %d cold reads walked the database's indexes",
				form, histories, events, read, kept, walked)
			require.Less(t, read, events, "the index reads fewer events than the histories hold")
			require.Greater(t, walked, histories/2, "most cold reads walk the database's indexes")
		})
	}
}

// TestIndexBuildRefusesAMovedSession: index_build.lua builds nothing for a
// history older than the session (an append came in between: a later
// revision) or of another incarnation, and a chunk that is not the next one
// of a build under way is refused; the build of the current history makes
// the index whole (xok).
func TestIndexBuildRefusesAMovedSession(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := Open(ctx, Config{RedisURL: testenv.RedisURL(t), Namespace: testenv.UniqueName(t, "ibuild-") + ":"})
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close(context.Background()) })
	created, err := svc.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	var history []cache.IndexedEvent
	for i := range 3 {
		ev := &Event{Author: "user", InvocationID: fmt.Sprint("inv", i), Content: testenv.Content("user", testenv.TextPart("hi"))}
		require.NoError(t, svc.AppendEvent(ctx, created.Session, ev))
		history = append(history, cache.IndexedEvent{Ts: ev.Timestamp.UnixMicro(), InvocationID: ev.InvocationID, Entry: compactionIndexEntry(ev)})
	}
	undo := svc.cache.Keys().Session("app", "u", "s").Undo
	require.NoError(t, svc.rdb.HDel(ctx, undo, "xok").Err()) // as a session read back from the database
	before, err := svc.rdb.HGetAll(ctx, undo).Result()
	require.NoError(t, err)
	inc := created.Session.inc
	require.ErrorIs(t, svc.cache.BuildIndex(ctx, base.SessionRef{App: "app", User: "u", ID: "s"}, inc, 2, history[:2]), cache.ErrIncomplete, "an older revision")
	require.ErrorIs(t, svc.cache.BuildIndex(ctx, base.SessionRef{App: "app", User: "u", ID: "s"}, inc+1, 3, history), cache.ErrIncomplete, "another incarnation")
	k := svc.cache.Keys().Session("app", "u", "s")
	r, err := svc.rdb.Eval(ctx, lua.IndexBuild, []string{k.Session, k.Undo}, inc, 3, 2, history[1].Ts, history[1].InvocationID, "").Slice()
	require.NoError(t, err)
	require.Equal(t, []any{int64(-5)}, r, "a chunk after none")
	after, err := svc.rdb.HGetAll(ctx, undo).Result()
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written by the refused calls (a chunk after none)")

	require.NoError(t, svc.cache.BuildIndex(ctx, base.SessionRef{App: "app", User: "u", ID: "s"}, inc, 3, history))
	require.Equal(t, "1", svc.rdb.HGet(ctx, undo, "xok").Val(), "the index is whole")
}

// TestCompactedViewWhenTheDatabaseMovedAnEvent: when an event the index
// names below the cached tail is not at its time in the database (a row
// someone else moved), the compacted Get reads the view from the whole
// history instead of failing or missing it.
func TestCompactedViewWhenTheDatabaseMovedAnEvent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, dbURL := openWithDatabase(ctx, t, "cmoved-", Config{MaxCachedEvents: 2})
	h := readHistory(t, testenv.NewHistoryGen(2, false).History())
	appendCopies(ctx, t, svc, "s", h)
	// The first compaction event: every view reads it (xh).
	at := slices.IndexFunc(h, hasCompaction)
	require.GreaterOrEqual(t, at, 0)
	compaction := h[at].ID
	require.NoError(t, svc.Flush(ctx))
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()
	res, err := db.ExecContext(ctx, `UPDATE events SET "timestamp" = "timestamp" + interval '1 microsecond' WHERE id = $1`, compaction)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	snap, err := svc.cache.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: "s"}, After: -1, Compacted: true})
	require.NoError(t, err)
	require.True(t, snap.Indexed)
	require.Contains(t, snap.Older, cache.EventRef{Seq: int64(at + 1), Ts: h[at].Timestamp.UnixMicro()}, "the index names it below the tail")
	whole, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	got, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: "s", Compacted: true})
	require.NoError(t, err)
	require.Equal(t, ids(CompactedView(slices.Collect(whole.Session.Events().All()))), ids(slices.Collect(got.Session.Events().All())))
}

// drain runs flusher's passes until svc's backlog is empty (at most a
// minute).
func drain(ctx context.Context, t *testing.T, svc *Service, flusher *Flusher) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		b, err := svc.Backlog(ctx)
		require.NoError(t, err)
		if b.Entries == 0 {
			return
		}
		_, err = flusher.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the backlog did not drain in 60 s")
	}
}

// openWithDatabase opens a service with cfg on the harness's Redis, in a
// namespace of its own, and a fresh migrated Postgres database (its URL
// returned); closed when t ends.
func openWithDatabase(ctx context.Context, t *testing.T, ns string, cfg Config) (*Service, string) {
	t.Helper()
	dbURL := testenv.FreshDatabase(t)
	return openWithDatabaseAt(ctx, t, ns, cfg, dbURL), dbURL
}

// openWithDatabaseAt is openWithDatabase on the database at dbURL, which it
// migrates.
func openWithDatabaseAt(ctx context.Context, t *testing.T, ns string, cfg Config, dbURL string) *Service {
	t.Helper()
	require.NoError(t, Migrate(ctx, dbURL))
	cfg.RedisURL, cfg.DatabaseURL, cfg.Namespace = testenv.RedisURL(t), dbURL, testenv.UniqueName(t, ns)+":"
	svc, err := Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc
}

// appendCopies creates session sid of app/u and appends a copy of each
// event of h to it, each keeping its time.
func appendCopies(ctx context.Context, t *testing.T, svc *Service, sid string, h []*Event) {
	t.Helper()
	created, err := svc.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: sid})
	require.NoError(t, err)
	for _, e := range h {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var c Event
		require.NoError(t, json.Unmarshal(b, &c))
		require.NoError(t, svc.AppendEvent(ctx, created.Session, &c), "%s event %s", sid, e.ID)
		require.True(t, c.Timestamp.Equal(e.Timestamp), "%s event %s keeps its time", sid, e.ID)
	}
}

// readsWhole reports whether the compacted view of h is read whole from the
// database when Redis lost it (viewFromDatabase): h has no compaction, or
// its last ADK JS compacted event's endTime does not read as a time.
func readsWhole(h []*Event) bool {
	python, js := false, false
	for _, e := range h {
		python = python || hasCompaction(e)
		js = js || isJSCompacted(e)
	}
	if js {
		_, _, known := lastJSCompacted(h)
		return !known
	}
	return !python
}

// TestCompactedViewFromTheFirstEvent: a compacted view whose compaction
// starts at or before the session's first event asks the database for
// nothing when Redis holds the compaction and what follows (the index keeps
// the first event's time, xt: no event is older), and one whose compaction
// leaves an older event uncovered reads that event from the database.
func TestCompactedViewFromTheFirstEvent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, _ := openWithDatabase(ctx, t, "cfirst-", Config{MaxCachedEvents: 4, DisableFlusher: true})
	flusher := svc.NewFlusher(nil)
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	secs := func(t time.Time) string { return string(appendEpochSeconds(nil, t)) }
	// A session of e1, e2, a compaction of [from, e2], e3, e4; Redis keeps the
	// newest 4 once flushed (e2 to e4).
	session := func(sid string, from time.Time) []string {
		t.Helper()
		created, err := svc.Create(ctx, &CreateRequest{AppName: "app", UserID: "u", SessionID: sid})
		require.NoError(t, err)
		comp := fmt.Sprintf(`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
			secs(from), secs(at(2)))
		evs := []*Event{
			{ID: "e1", InvocationID: "i1", Author: "user", Timestamp: at(1)},
			{ID: "e2", InvocationID: "i1", Author: "model", Timestamp: at(2)},
			{ID: "c", InvocationID: "i2", Author: "user", Timestamp: at(3), Actions: EventActions{Compaction: json.RawMessage(comp)}},
			{ID: "e3", InvocationID: "i3", Author: "user", Timestamp: at(4)},
			{ID: "e4", InvocationID: "i3", Author: "model", Timestamp: at(5)},
		}
		for _, e := range evs {
			require.NoError(t, svc.AppendEvent(ctx, created.Session, e))
		}
		drain(ctx, t, svc, flusher)
		snap, err := svc.cache.Get(ctx, cache.GetArgs{SessionRef: base.SessionRef{App: "app", User: "u", ID: sid}, After: -1, Compacted: true})
		require.NoError(t, err)
		require.True(t, snap.Indexed, "%s: the view is read from the index", sid)
		require.Empty(t, snap.Older, "%s: every event the view names is cached", sid)
		var ranges []string
		for _, r := range snap.Ranges {
			ranges = append(ranges, fmt.Sprintf("(%d, %d)", r.Lo, r.Hi))
		}
		got, err := svc.Get(ctx, &GetRequest{AppName: "app", UserID: "u", SessionID: sid, Compacted: true})
		require.NoError(t, err)
		require.Equal(t, ids(CompactedView(evs)), ids(slices.Collect(got.Session.Events().All())), "%s: the view", sid)
		return ranges
	}
	require.Empty(t, session("from-create", t0), "a compaction from before the first event: nothing older to read")
	require.Empty(t, session("from-first", at(1)), "a compaction from the first event: nothing older to read")
	require.Equal(t, []string{fmt.Sprintf("(%d, %d)", at(1).UnixMicro()-1, at(2).UnixMicro())}, session("from-second", at(2)),
		"e1 lies before the compaction: read from the database, from the first event's time")
}
