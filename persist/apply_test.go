package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/cache/eventjson"
)

// timeText is SQL that formats a timestamp column as
// 'YYYY-MM-DD HH:MM:SS.ffffff'; on SQLite it is the stored text itself.
func timeText(s *Store, col string) string {
	if s.d.name == "postgres" {
		return "to_char(" + col + ", 'YYYY-MM-DD HH24:MI:SS.US')"
	}
	return "CAST(" + col + " AS TEXT)"
}

func TestApplyWritesADKRows(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		k := skey("s1")
		u := upsert(k, inc1, 0, 3)
		other := upsert(base.SessionRef{App: "app", User: "u2", ID: "s9"}, inc2, 0, 0)
		apply(t, s, &Batch{
			Sessions:   []SessionUpsert{u, other},
			UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 1, State: state(1), UpdateTime: eventTime(inc1, 2)}},
		})

		same(t, "sessions", queryStrings(t, s.db, `SELECT app_name, user_id, id, CAST(state AS TEXT), `+
			timeText(s, "create_time")+`, `+timeText(s, "update_time")+` FROM sessions WHERE id = 's1'`), [][]string{{
			"app", "u1", "s1", jsonText(s, `{"count":3,"gone":null}`),
			"2025-03-04 05:06:07.123456", "2025-03-04 05:06:10.123789"}})
		// The first session of an app and a user creates their {} rows;
		// a state snapshot in the same batch wins.
		same(t, "app_states", queryStrings(t, s.db, `SELECT app_name, CAST(state AS TEXT), `+timeText(s, "update_time")+` FROM app_states`),
			[][]string{{"app", "{}", "2025-03-04 05:06:07.123456"}})
		same(t, "user_states", queryStrings(t, s.db, `SELECT app_name, user_id, CAST(state AS TEXT), `+timeText(s, "update_time")+
			` FROM user_states ORDER BY user_id`), [][]string{
			{"app", "u1", jsonText(s, `{"nil":null,"rev":1}`), "2025-03-04 05:06:09.123678"},
			{"app", "u2", "{}", "2025-03-04 06:06:07.123456"},
		})

		rows := queryStrings(t, s.db, `SELECT id, app_name, user_id, session_id, invocation_id, `+timeText(s, `"timestamp"`)+
			`, CAST(event_data AS TEXT) FROM events ORDER BY "timestamp"`)
		same(t, "events", len(rows), 3)
		for i, r := range rows {
			seq := int64(i + 1)
			e := u.Events[i]
			same(t, "event columns", r[:6], []string{e.ID, "app", "u1", "s1", e.InvocationID, formatTime(e.Timestamp)})
			var got, want map[string]json.RawMessage
			must(t, json.Unmarshal([]byte(r[6]), &got))
			must(t, json.Unmarshal(storageJSON(seq), &want))
			// id, invocation_id and timestamp (epoch ms) are the columns' values.
			same(t, "event_data id", string(got["id"]), `"`+e.ID+`"`)
			same(t, "event_data invocation_id", string(got["invocation_id"]), `"`+e.InvocationID+`"`)
			same(t, "event_data timestamp", string(got["timestamp"]), fmt.Sprintf("%d.%03d", e.Timestamp.UnixMilli(), e.Timestamp.UnixMicro()%1000))
			for _, k := range []string{"id", "invocation_id", "timestamp"} {
				delete(got, k)
				delete(want, k)
			}
			same(t, "other members", jsonValue(t, got), jsonValue(t, want))
			var actions struct {
				StateDelta map[string]any `json:"state_delta"`
			}
			must(t, json.Unmarshal(got["actions"], &actions))
			same(t, "state_delta keeps prefixes and null", actions.StateDelta, map[string]any{"app:a": float64(seq), "user:u": "x", "k": nil})
			if s.d.name == "sqlite" {
				// TEXT keeps every byte.
				data, err := eventjson.WithColumns(storageJSON(seq), e.ID, e.InvocationID, e.Timestamp)
				must(t, err)
				same(t, "event_data bytes", r[6], string(data))
			}
		}
		same(t, "bookkeeping", queryStrings(t, s.db, `SELECT app_name, user_id, session_id, incarnation, rev
FROM adksession_sessions ORDER BY user_id`), [][]string{
			{"app", "u1", "s1", fmt.Sprint(inc1), "3"},
			{"app", "u2", "s9", fmt.Sprint(inc2), "0"},
		})
		same(t, "state bookkeeping", queryStrings(t, s.db, `SELECT app_name, user_id, rev FROM adksession_states`),
			[][]string{{"app", "u1", "1"}})
	})
}

// jsonText is how the database gives back a JSON column that was written
// as compact JSON: jsonb has its own spacing and key order.
func jsonText(s *Store, compact string) string {
	if s.d.name != "postgres" {
		return compact
	}
	return map[string]string{
		`{"count":1,"gone":null}`: `{"gone": null, "count": 1}`,
		`{"count":2,"gone":null}`: `{"gone": null, "count": 2}`,
		`{"count":3,"gone":null}`: `{"gone": null, "count": 3}`,
		`{"nil":null,"rev":1}`:    `{"nil": null, "rev": 1}`,
		`{"nil":null,"rev":3}`:    `{"nil": null, "rev": 3}`,
		`{"nil":null,"rev":5}`:    `{"nil": null, "rev": 5}`,
	}[compact]
}

// jsonValue decodes the members of m for comparison.
func jsonValue(t *testing.T, m map[string]json.RawMessage) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		var x any
		must(t, json.Unmarshal(v, &x))
		out[k] = x
	}
	return out
}

func TestApplyIsIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		b1 := &Batch{
			Deletes:    []SessionDelete{{skey("never"), inc1, 0}},
			Sessions:   []SessionUpsert{upsert(skey("s1"), inc1, 0, 3), upsert(skey("s2"), inc1, 0, 2)},
			AppStates:  []StateUpsert{{AppName: "app", Rev: 1, State: state(1), UpdateTime: eventTime(inc1, 1)}},
			UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 1, State: state(1), UpdateTime: eventTime(inc1, 1)}},
		}
		b2 := &Batch{
			Sessions:   []SessionUpsert{upsert(skey("s1"), inc1, 4, 6)},
			AppStates:  []StateUpsert{{AppName: "app", Rev: 2, State: state(2), UpdateTime: eventTime(inc1, 5)}},
			UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 2, State: state(2), UpdateTime: eventTime(inc1, 5)}},
		}
		apply(t, s, b1)
		d1 := dump(t, s)
		apply(t, s, b1)
		same(t, "after replaying b1", dump(t, s), d1)

		apply(t, s, b2)
		d2 := dump(t, s)
		same(t, "events after b2", len(d2["events"]), 8)
		for _, b := range []*Batch{b1, b2, b1} {
			apply(t, s, b)
			same(t, "after replaying an older batch", dump(t, s), d2)
		}
		ctx := context.Background()
		ls, err := s.LoadSession(ctx, skey("s1"), Window{})
		must(t, err)
		same(t, "rev", ls.Rev, int64(6))
		same(t, "state", string(ls.State["count"]), "6")
		same(t, "app state", string(ls.AppState["rev"]), "2")
		same(t, "user state", string(ls.UserState["rev"]), "2")
		// A cold read's load: the same session, without the scoped states,
		// each event prepared as it came in.
		le, err := s.LoadSessionEvents(ctx, skey("s1"), Window{}, func(r *EventRow) (string, error) {
			return r.ID + "@" + r.Timestamp.Format(time.RFC3339Nano), nil
		})
		must(t, err)
		same(t, "LoadSessionEvents: app and user state", [2]bool{le.AppState == nil, le.UserState == nil}, [2]bool{true, true})
		same(t, "LoadSessionEvents: events", len(le.Events), len(ls.Events))
		for i := range le.Events {
			e := &le.Events[i]
			same(t, "LoadSessionEvents: prepared", e.Prepared, e.ID+"@"+e.Timestamp.Format(time.RFC3339Nano))
			e.Prepared = ""
		}
		le.AppState, le.UserState = ls.AppState, ls.UserState
		same(t, "LoadSessionEvents: the rest", le, ls)
		_, err = s.LoadSessionEvents(ctx, skey("s1"), Window{}, func(r *EventRow) (string, error) {
			return "", errors.New("refused")
		})
		same(t, "LoadSessionEvents: Prepare's error", fmt.Sprint(err), `load session s1 of app app, user u1: read events: refused`)
	})
}

func TestApplyStateNeverGoesBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		for _, rev := range []int64{5, 3, 5, 4} {
			apply(t, s, &Batch{
				AppStates:  []StateUpsert{{AppName: "app", Rev: rev, State: state(rev), UpdateTime: eventTime(inc1, rev)}},
				UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: rev, State: state(rev), UpdateTime: eventTime(inc1, rev)}},
			})
		}
		st, rev, err := s.LoadAppState(ctx, "app")
		must(t, err)
		same(t, "app rev", rev, int64(5))
		same(t, "app state", string(st["rev"]), "5")
		st, v, err := s.LoadUserState(ctx, "app", "u1")
		must(t, err)
		same(t, "user rev", v.Rev, int64(5))
		same(t, "user state", string(st["rev"]), "5")
		same(t, "update time", queryStrings(t, s.db, `SELECT `+timeText(s, "update_time")+` FROM app_states`),
			[][]string{{formatTime(eventTime(inc1, 5))}})
	})
}

func TestApplyDeleteIsFinal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		k := skey("s1")
		create := &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 3), upsert(skey("other"), inc1, 0, 2)}}
		del := &Batch{Deletes: []SessionDelete{{k, inc1, 0}}}
		apply(t, s, create)
		apply(t, s, del)
		d := dump(t, s)
		same(t, "sessions left", len(d["sessions"]), 1)
		same(t, "events left (the other session's)", len(d["events"]), 2)
		same(t, "app and user rows stay", len(d["app_states"])+len(d["user_states"]), 2)
		same(t, "tombstone", queryStrings(t, s.db, `SELECT rev FROM adksession_sessions WHERE session_id = 's1' AND deleted`),
			[][]string{{"3"}})
		for _, b := range []*Batch{create, del, create} {
			apply(t, s, b)
			same(t, "after replay", dump(t, s), d)
		}
		if _, err := s.LoadSession(ctx, k, Window{}); !errors.Is(err, base.ErrNotFound) {
			t.Fatalf("LoadSession of a deleted session: got %v, want ErrNotFound", err)
		}
	})
}

func TestApplyRecreatedID(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		// s1 is deleted then re-created; s2 is re-created without the
		// delete reaching the database.
		b1 := &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 3), upsert(skey("s2"), inc1, 0, 3)}}
		b2 := &Batch{Deletes: []SessionDelete{{skey("s1"), inc1, 0}}}
		b3 := &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc2, 0, 2), upsert(skey("s2"), inc2, 0, 2)}}
		for _, b := range []*Batch{b1, b2, b3} {
			apply(t, s, b)
		}
		d := dump(t, s)
		for _, id := range []string{"s1", "s2"} {
			ls, err := s.LoadSession(ctx, skey(id), Window{})
			must(t, err)
			same(t, id+" incarnation", ls.Incarnation, inc2)
			same(t, id+" events", eventIDs(ls.Events), []string{eventID(inc2, 1), eventID(inc2, 2)})
			same(t, id+" create time", ls.CreateTime, upsert(skey(id), inc2, 0, 0).CreateTime)
		}
		for _, b := range []*Batch{b1, b2, b1, b3} {
			apply(t, s, b)
			same(t, "after replay", dump(t, s), d)
		}
		// Deleting the earlier incarnation again does not touch the new one.
		apply(t, s, &Batch{Deletes: []SessionDelete{{skey("s2"), inc1, 0}}})
		same(t, "after deleting the old incarnation", dump(t, s), d)
	})
}

func eventIDs(events []EventRow) []string {
	var ids []string
	for _, e := range events {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestApplyRejectsInvalidData(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 1)}})
		before := dump(t, s)
		bad := upsert(skey("s1"), inc1, 2, 3)
		bad.Events[1].Data = []byte(`["not an object"]`)
		badState := upsert(skey("s2"), inc1, 0, 0)
		badState.State["x"] = json.RawMessage(`{`)
		for _, b := range []*Batch{
			{Sessions: []SessionUpsert{bad}},
			{Sessions: []SessionUpsert{badState}},
			{AppStates: []StateUpsert{{AppName: "app", Rev: 9, State: map[string]json.RawMessage{"x": []byte("nope")}}}},
		} {
			if err := s.Apply(context.Background(), b); !errors.Is(err, ErrInvalidBatch) {
				t.Fatalf("Apply: got %v, want ErrInvalidBatch", err)
			}
			same(t, "nothing written", dump(t, s), before)
		}
	})
}

func TestApplyConcurrently(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, u := migratedAt(t, b)
		ctx := context.Background()
		s2, err := Open(ctx, u) // a second process
		must(t, err)
		defer s2.Close()
		// 20 snapshots of one session, user and app, applied by 20
		// goroutines released at once: the database ends at the latest.
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 20)
		for i := range errs {
			rev := int64(i + 1)
			store := []*Store{s, s2}[i%2]
			wg.Go(func() {
				<-start
				errs[i] = store.Apply(ctx, &Batch{
					Sessions:   []SessionUpsert{upsert(skey("s1"), inc1, rev, rev), upsert(skey(fmt.Sprint("x", rev)), inc1, 0, 1)},
					AppStates:  []StateUpsert{{AppName: "app", Rev: rev, State: state(rev), UpdateTime: eventTime(inc1, rev)}},
					UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: rev, State: state(rev), UpdateTime: eventTime(inc1, rev)}},
				})
			})
		}
		close(start)
		wg.Wait()
		must(t, errors.Join(errs...))
		ls, err := s.LoadSession(ctx, skey("s1"), Window{})
		must(t, err)
		same(t, "rev", ls.Rev, int64(20))
		same(t, "state", string(ls.State["count"]), "20")
		same(t, "app state", string(ls.AppState["rev"]), "20")
		same(t, "user state", string(ls.UserState["rev"]), "20")
		// Each event was written by the batch that carried it unless a later
		// snapshot had already landed; the last one always is.
		if n := len(ls.Events); n < 1 || ls.Events[n-1].ID != eventID(inc1, 20) {
			t.Fatalf("events: %v", eventIDs(ls.Events))
		}
		same(t, "other sessions", len(queryStrings(t, s.db, `SELECT id FROM sessions`)), 21)
	})
}
