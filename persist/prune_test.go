package persist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// pruneAt is a cutoff between the idle sessions of these tests (incarnation
// inc1, events a few seconds later) and the fresh ones (inc2, an hour later).
var pruneAt = time.UnixMicro(inc1 + 1_800_000_000).UTC()

func TestSessionsKeyOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		got, err := s.sessionsKeyOrder(context.Background())
		must(t, err)
		want := map[string][]string{"postgres": {"id", "app_name", "user_id"}, "sqlite": {"app_name", "user_id", "id"}}[b.name]
		same(t, "primary key of sessions", got, want)
	})
}

// TestPruneWalk: the walk returns every idle session once, in pages of at
// most the limit, in primary-key order (whichever it is), of one app when
// asked; fresh sessions, deleted ones and those of other apps never.
func TestPruneWalk(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		var batch Batch
		want := map[string][]base.SessionRef{}
		for i := range 23 {
			k := base.SessionRef{App: []string{"a", "b"}[i%2], User: fmt.Sprintf("u%d", i%5), ID: fmt.Sprintf("s%02d", 22-i)}
			inc := inc1
			if i%4 == 3 {
				inc = inc2 // fresh
			} else {
				want[""] = append(want[""], k)
				want[k.App] = append(want[k.App], k)
			}
			batch.Sessions = append(batch.Sessions, upsert(k, inc, 0, int64(i%3)))
		}
		apply(t, s, &batch)
		gone := base.SessionRef{App: "a", User: "u0", ID: "deleted"}
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(gone, inc1, 0, 1)}})
		apply(t, s, &Batch{Deletes: []SessionDelete{{gone, inc1, 0}}})
		adk := base.SessionRef{App: "a", User: "adk", ID: "py"}
		insertADKSession(t, s, adk, 3)
		want[""], want["a"] = append(want[""], adk), append(want["a"], adk)

		order, err := s.sessionsKeyOrder(ctx)
		must(t, err)
		for app, keys := range want {
			walk, err := s.IdleSessions(ctx, pruneAt, app)
			must(t, err)
			var got []base.SessionRef
			for {
				page, err := walk.Next(ctx, 4)
				must(t, err)
				if len(page) == 0 {
					break
				}
				if len(page) > 4 {
					t.Fatalf("a page of %d, limit 4", len(page))
				}
				for _, c := range page {
					got = append(got, c.Key)
					if c.Key == adk {
						same(t, "untracked session", []any{c.Tracked, c.Incarnation, c.Rev}, []any{false, adkCreateTime.UnixMicro(), int64(3)})
					} else if !c.Tracked || c.Incarnation != inc1 {
						t.Fatalf("candidate %v: tracked %v, incarnation %d", c.Key, c.Tracked, c.Incarnation)
					}
				}
			}
			sortKeys(keys, order)
			same(t, "idle sessions of app "+app+" in key order", got, keys)
			n, err := s.CountIdleSessions(ctx, pruneAt, app)
			must(t, err)
			same(t, "count", n, int64(len(keys)))
		}
	})
}

// sortKeys sorts keys in the order of the columns named.
func sortKeys(keys []base.SessionRef, order []string) {
	slices.SortFunc(keys, func(x, y base.SessionRef) int {
		for _, c := range order {
			a, b := map[string]string{"app_name": x.App, "user_id": x.User, "id": x.ID}[c],
				map[string]string{"app_name": y.App, "user_id": y.User, "id": y.ID}[c]
			if a != b {
				if a < b {
					return -1
				}
				return 1
			}
		}
		return 0
	})
}

// TestDeleteIdleSessions: the candidates still as read are deleted with
// their events and bookkeeping; one updated since (a flushed batch) and
// one re-created are kept (Changed); one already gone is reported Gone; the
// counts are the deleted events and the stored JSON size; a dry run counts
// the same and deletes nothing.
func TestDeleteIdleSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		keys := []base.SessionRef{skey("s1"), skey("s2"), skey("s3"), skey("s4")}
		var batch Batch
		for _, k := range keys {
			batch.Sessions = append(batch.Sessions, upsert(k, inc1, 0, 3))
		}
		apply(t, s, &batch)
		walk, err := s.IdleSessions(ctx, pruneAt, "")
		must(t, err)
		cands, err := walk.Next(ctx, 10)
		must(t, err)
		same(t, "candidates", len(cands), 4)
		cands = append(cands, PruneCandidate{Key: skey("never"), Tracked: true, Incarnation: inc1, Rev: 1, UpdateTime: pruneAt})
		byID := map[string]int{}
		for i, c := range cands {
			byID[c.Key.ID] = i
		}
		// After the walk read them: s2 gets an event, s3 is re-created.
		next := upsert(skey("s2"), inc1, 4, 4)
		next.UpdateTime = eventTime(inc1, 4)
		apply(t, s, &Batch{Sessions: []SessionUpsert{next}})
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s3"), inc1+1, 0, 1)}})
		before := dump(t, s)

		dry, err := s.DeleteIdleSessions(ctx, cands, true)
		must(t, err)
		same(t, "dry run changed rows", dump(t, s), before)
		got, err := s.DeleteIdleSessions(ctx, cands, false)
		must(t, err)
		same(t, "dry run and prune", *dry, *got)
		same(t, "deleted", got.Deleted, []base.SessionRef{skey("s1"), skey("s4")})
		same(t, "changed", got.Changed, []base.SessionRef{skey("s2"), skey("s3")})
		same(t, "gone", got.Gone, []base.SessionRef{skey("never")})
		same(t, "events", got.Events, int64(6))
		if got.Bytes < 6*int64(len(storageJSON(1)))/2 {
			t.Fatalf("bytes %d: less than half the event data deleted", got.Bytes)
		}
		same(t, "sessions left", queryStrings(t, s.db, `SELECT id FROM sessions ORDER BY id`), [][]string{{"s2"}, {"s3"}})
		same(t, "events left", queryStrings(t, s.db, `SELECT session_id, count(*) FROM events GROUP BY session_id ORDER BY session_id`),
			[][]string{{"s2", "4"}, {"s3", "1"}})
		same(t, "bookkeeping left", queryStrings(t, s.db, `SELECT session_id FROM adksession_sessions ORDER BY session_id`),
			[][]string{{"s2"}, {"s3"}})
		// Deleting again finds them gone.
		again, err := s.DeleteIdleSessions(ctx, []PruneCandidate{cands[byID["s1"]]}, false)
		must(t, err)
		same(t, "gone after the prune", again.Gone, []base.SessionRef{skey("s1")})
	})
}

// TestDeleteSessionlessStates: a user's and an app's state rows go when no
// session of theirs is left, with their bookkeeping; they stay while one is;
// a dry run counts as left only the sessions updated since its cutoff.
func TestDeleteSessionlessStates(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		withState := func(u SessionUpsert) *Batch {
			return &Batch{Sessions: []SessionUpsert{u},
				UserStates: []StateUpsert{{AppName: u.Key.App, UserID: u.Key.User, Rev: 7, State: u.State, UpdateTime: u.UpdateTime}},
				AppStates:  []StateUpsert{{AppName: u.Key.App, Rev: 9, State: u.State, UpdateTime: u.UpdateTime}}}
		}
		lone := base.SessionRef{App: "lone", User: "u1", ID: "s"}
		kept := base.SessionRef{App: "app", User: "u2", ID: "fresh"}
		apply(t, s, withState(upsert(skey("old"), inc1, 0, 1)))
		apply(t, s, withState(upsert(kept, inc2, 0, 1)))
		apply(t, s, withState(upsert(lone, inc1, 0, 1)))
		users := []StateRef{{AppName: "app", UserID: "u1"}, {AppName: "app", UserID: "u2"}, {AppName: "lone", UserID: "u1"}}
		apps := []StateRef{{AppName: "app"}, {AppName: "lone"}}

		dryUsers, err := s.DeleteSessionlessUsers(ctx, users, pruneAt, true)
		must(t, err)
		same(t, "dry run: users whose sessions are all idle", dryUsers, []StateRef{{"app", "u1", 7}, {"lone", "u1", 7}})
		dryApps, err := s.DeleteSessionlessApps(ctx, apps, pruneAt, true)
		must(t, err)
		same(t, "dry run: apps whose sessions are all idle", dryApps, []StateRef{{"lone", "", 9}})

		// Sessions still there: nothing goes.
		none, err := s.DeleteSessionlessUsers(ctx, users, pruneAt, false)
		must(t, err)
		same(t, "users with sessions", len(none), 0)
		apply(t, s, &Batch{Deletes: []SessionDelete{{skey("old"), inc1, 0}, {lone, inc1, 0}}})
		gone, err := s.DeleteSessionlessUsers(ctx, users, pruneAt, false)
		must(t, err)
		same(t, "users left without sessions", gone, []StateRef{{"app", "u1", 7}, {"lone", "u1", 7}})
		goneApps, err := s.DeleteSessionlessApps(ctx, apps, pruneAt, false)
		must(t, err)
		same(t, "apps left without sessions", goneApps, []StateRef{{"lone", "", 9}})
		same(t, "user_states", queryStrings(t, s.db, `SELECT app_name, user_id FROM user_states ORDER BY 1, 2`), [][]string{{"app", "u2"}})
		same(t, "app_states", queryStrings(t, s.db, `SELECT app_name FROM app_states ORDER BY 1`), [][]string{{"app"}})
		same(t, "state bookkeeping", queryStrings(t, s.db, `SELECT app_name, user_id FROM adksession_states ORDER BY 1, 2`),
			[][]string{{"app", ""}, {"app", "u2"}})
	})
}

// TestDeleteSessionlessStatesADKWrote: state rows that ADK wrote (no
// bookkeeping row) go as well, with revision 0.
func TestDeleteSessionlessStatesADKWrote(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		at := formatTime(adkCreateTime)
		_, err := s.db.Exec(`INSERT INTO app_states (app_name, state, update_time) VALUES ('adk', '{}', $1)`, at)
		must(t, err)
		_, err = s.db.Exec(`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ('adk', 'u', '{}', $1)`, at)
		must(t, err)
		users, err := s.DeleteSessionlessUsers(ctx, []StateRef{{AppName: "adk", UserID: "u"}}, pruneAt, false)
		must(t, err)
		same(t, "users", users, []StateRef{{"adk", "u", 0}})
		apps, err := s.DeleteSessionlessApps(ctx, []StateRef{{AppName: "adk"}}, pruneAt, false)
		must(t, err)
		same(t, "apps", apps, []StateRef{{"adk", "", 0}})
		same(t, "user_states", len(queryStrings(t, s.db, `SELECT 1 FROM user_states`)), 0)
		same(t, "app_states", len(queryStrings(t, s.db, `SELECT 1 FROM app_states`)), 0)
	})
}

// TestPurgeTombstones: a walk stamps the tombstones it sees first and
// purges, in a later walk, those stamped before the margin; a tombstone of
// an id re-created since is not purged, and one deleted again is stamped
// again (its incarnation changed), so its margin starts over.
func TestPurgeTombstones(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		var create, del Batch
		for i := range 7 {
			k := skey(fmt.Sprintf("t%d", i))
			create.Sessions = append(create.Sessions, upsert(k, inc1, 0, 1))
			del.Deletes = append(del.Deletes, SessionDelete{k, inc1, 0})
		}
		apply(t, s, &create)
		apply(t, s, &del)
		walk := func(now time.Time, dryRun bool) (stamped, purged int64) {
			w := s.Tombstones("")
			for {
				b, err := w.Next(ctx, 3, now, time.Hour, dryRun)
				must(t, err)
				if b.Read == 0 {
					return stamped, purged
				}
				if b.Read > 3 {
					t.Fatalf("read %d, limit 3", b.Read)
				}
				stamped, purged = stamped+b.Stamped, purged+b.Purged
			}
		}
		t0 := time.Now()
		st, pu := walk(t0, false)
		same(t, "first walk: stamped, purged", []int64{st, pu}, []int64{7, 0})
		st, pu = walk(t0.Add(30*time.Minute), false)
		same(t, "within the margin", []int64{st, pu}, []int64{0, 0})
		// t0 re-created, t1 re-created and deleted again.
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("t0"), inc2, 0, 1), upsert(skey("t1"), inc2, 0, 1)}})
		apply(t, s, &Batch{Deletes: []SessionDelete{{skey("t1"), inc2, 0}}})
		st, pu = walk(t0.Add(2*time.Hour), true)
		same(t, "dry run", []int64{st, pu}, []int64{1, 5})
		st, pu = walk(t0.Add(2*time.Hour), false)
		same(t, "after the margin", []int64{st, pu}, []int64{1, 5})
		same(t, "bookkeeping left", queryStrings(t, s.db, `SELECT session_id, deleted FROM adksession_sessions ORDER BY 1`),
			[][]string{{"t0", boolText(s, false)}, {"t1", boolText(s, true)}})
		st, pu = walk(t0.Add(4*time.Hour), false)
		same(t, "t1's margin started again", []int64{st, pu}, []int64{0, 1})
	})
}

// boolText is how queryStrings reads a boolean column.
func boolText(s *Store, v bool) string {
	switch {
	case s.d == postgres && v:
		return "true"
	case s.d == postgres:
		return "false"
	case v:
		return "1"
	}
	return "0"
}

// TestPruneWalkPlan: a page of the walk after a key is a range of the
// sessions primary key read in order, no sort and no scan from the start:
// every page costs O(log n + page), whatever the table's size.
func TestPruneWalkPlan(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		w, err := s.IdleSessions(context.Background(), pruneAt, "")
		must(t, err)
		w.after = &base.SessionRef{App: "a", User: "b", ID: "c"}
		q, args := w.page(10)
		plan := explain(t, s, q, args)
		want := map[string]string{"postgres": "Index Cond: (ROW((id)::text, (app_name)::text, (user_id)::text) > ROW(", "sqlite": "SEARCH s USING INDEX sqlite_autoindex_sessions_1 ((app_name,user_id,id)>(?,?,?))"}[b.name]
		if !strings.Contains(plan, want) || strings.Contains(plan, "Sort") || strings.Contains(plan, "TEMP B-TREE") {
			t.Fatalf("plan of a page:\n%s\nwant %q and no sort", plan, want)
		}
	})
}
