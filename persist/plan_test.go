package persist

import (
	"strconv"
	"testing"

	"github.com/adksession/adksession/cache/base"
)

func TestPlanBatch(t *testing.T) {
	a, b := skey("a"), skey("b")
	ups := func(k base.SessionRef, inc, rev int64) SessionUpsert { return upsert(k, inc, rev, rev) }
	type want struct {
		purge    []base.SessionRef
		sessions []string // "id inc rev"
		events   []string
		tracked  []trackedRow
	}
	for _, tc := range []struct {
		name    string
		tracked map[base.SessionRef]tracked
		batch   Batch
		want    want
	}{
		{
			name:  "untracked upsert applies without purge",
			batch: Batch{Sessions: []SessionUpsert{ups(a, inc1, 3)}},
			want: want{sessions: []string{"a 1 3"}, events: []string{eventID(inc1, 3)},
				tracked: []trackedRow{{a, tracked{inc1, 3, false, 0}}}},
		},
		{
			name:    "same incarnation, same rev applies again",
			tracked: map[base.SessionRef]tracked{a: {inc1, 3, false, 0}},
			batch:   Batch{Sessions: []SessionUpsert{ups(a, inc1, 3)}},
			want: want{sessions: []string{"a 1 3"}, events: []string{eventID(inc1, 3)},
				tracked: []trackedRow{{a, tracked{inc1, 3, false, 0}}}},
		},
		{
			name:    "older rev writes nothing",
			tracked: map[base.SessionRef]tracked{a: {inc1, 4, false, 0}},
			batch:   Batch{Sessions: []SessionUpsert{ups(a, inc1, 3)}},
		},
		{
			name:    "deleted incarnation is not resurrected",
			tracked: map[base.SessionRef]tracked{a: {inc1, 3, true, 0}},
			batch:   Batch{Sessions: []SessionUpsert{ups(a, inc1, 9)}},
		},
		{
			name:    "older incarnation writes nothing",
			tracked: map[base.SessionRef]tracked{a: {inc2, 0, false, 0}},
			batch:   Batch{Sessions: []SessionUpsert{ups(a, inc1, 9)}},
		},
		{
			name:    "later incarnation purges the earlier one",
			tracked: map[base.SessionRef]tracked{a: {inc1, 7, false, 0}},
			batch:   Batch{Sessions: []SessionUpsert{ups(a, inc2, 1)}},
			want: want{purge: []base.SessionRef{a}, sessions: []string{"a 2 1"}, events: []string{eventID(inc2, 1)},
				tracked: []trackedRow{{a, tracked{inc2, 1, false, 0}}}},
		},
		{
			name:    "delete keeps the tracked rev",
			tracked: map[base.SessionRef]tracked{a: {inc1, 7, false, 0}},
			batch:   Batch{Deletes: []SessionDelete{{a, inc1, 0}}},
			want:    want{purge: []base.SessionRef{a}, tracked: []trackedRow{{a, tracked{inc1, 7, true, 0}}}},
		},
		{
			name:  "delete of an untracked session",
			batch: Batch{Deletes: []SessionDelete{{a, inc1, 0}}},
			want:  want{purge: []base.SessionRef{a}, tracked: []trackedRow{{a, tracked{inc1, 0, true, 0}}}},
		},
		{
			name:    "delete of an earlier incarnation is ignored",
			tracked: map[base.SessionRef]tracked{a: {inc2, 1, false, 0}},
			batch:   Batch{Deletes: []SessionDelete{{a, inc1, 0}}},
		},
		{
			name:    "delete then re-create in one batch",
			tracked: map[base.SessionRef]tracked{a: {inc1, 7, false, 0}},
			batch: Batch{Deletes: []SessionDelete{{a, inc1, 0}},
				Sessions: []SessionUpsert{ups(a, inc1, 8), ups(a, inc2, 1)}},
			want: want{purge: []base.SessionRef{a}, sessions: []string{"a 2 1"}, events: []string{eventID(inc2, 1)},
				tracked: []trackedRow{{a, tracked{inc2, 1, false, 0}}}},
		},
		{
			name:  "two incarnations in one batch keep the later one's events",
			batch: Batch{Sessions: []SessionUpsert{ups(a, inc1, 1), ups(a, inc2, 1), ups(b, inc1, 1), ups(b, inc1, 2)}},
			want: want{purge: []base.SessionRef{a}, sessions: []string{"a 2 1", "b 1 2"},
				events:  []string{eventID(inc2, 1), eventID(inc1, 1), eventID(inc1, 2)},
				tracked: []trackedRow{{a, tracked{inc2, 1, false, 0}}, {b, tracked{inc1, 2, false, 0}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planBatch(&tc.batch, tc.tracked, nil)
			var got want
			got.purge = p.purge
			for _, u := range p.sessions {
				inc := map[int64]string{inc1: "1", inc2: "2"}[u.Incarnation]
				got.sessions = append(got.sessions, u.Key.ID+" "+inc+" "+itoa(u.Rev))
			}
			for _, e := range p.events {
				got.events = append(got.events, e.ID)
			}
			got.tracked = p.tracked
			same(t, "plan", got, tc.want)
		})
	}
}

func TestPlanStates(t *testing.T) {
	st := func(app, user string, rev int64) StateUpsert {
		return StateUpsert{AppName: app, UserID: user, Rev: rev, State: state(rev)}
	}
	b := &Batch{
		Sessions:   []SessionUpsert{upsert(skey("s"), inc2, 0, 0), upsert(skey("r"), inc1, 0, 0)},
		AppStates:  []StateUpsert{st("app", "", 4), st("app", "", 6), st("app", "", 5), st("old", "", 2)},
		UserStates: []StateUpsert{st("app", "u1", 3), st("app", "u2", 1)},
	}
	p := planBatch(b, nil, map[stateKey]int64{{"old", ""}: 2, {"app", "u2"}: 0})
	same(t, "app states", len(p.appStates), 1)
	same(t, "app rev", p.appStates[0].Rev, int64(6))
	same(t, "user states", len(p.userStates), 2)
	same(t, "user", p.userStates[0].UserID+itoa(p.userStates[0].Rev)+p.userStates[1].UserID+itoa(p.userStates[1].Rev), "u13u21")
	same(t, "tracked revs", p.stateRevs, []stateRev{{stateKey{"app", ""}, 6, 0, nil}, {stateKey{"app", "u1"}, 3, 0, nil}, {stateKey{"app", "u2"}, 1, 0, nil}})
	// The {} rows get the earliest create time of the batch's sessions.
	same(t, "ensure apps", p.ensureApps, []stateSeed{{stateKey{"app", ""}, upsert(skey("r"), inc1, 0, 0).CreateTime}})
	same(t, "ensure users", p.ensureUsers, []stateSeed{{stateKey{"app", "u1"}, upsert(skey("r"), inc1, 0, 0).CreateTime}})
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
