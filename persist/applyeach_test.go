package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/adksession/adksession/cache/base"
)

// poison is a value that a backend refuses for good: by adksession itself
// (not JSON, not an object: every backend) or by Postgres only.
type poison struct {
	name     string
	value    string
	postgres bool // refused by Postgres only (SQLite stores it)
}

var (
	notJSON     = poison{"not JSON", `{`, false}
	nulEscape   = poison{"NUL escape", `"a\u0000b"`, true}
	hugeNumber  = poison{"number out of Postgres's range", `1e1000000`, true}
	invalidUTF8 = poison{"invalid UTF-8", "\"a\xffb\"", true}
)

// refuses tells whether the backend refuses p.
func refuses(b backend, p poison) bool { return !p.postgres || b.name == "postgres" }

// TestApplyEachIsolates: a batch holding poison in an event, a session's
// state, a user's state and an app's state is refused by Apply as a whole;
// ApplyEach writes everything else and returns exactly the poisoned units.
func TestApplyEachIsolates(t *testing.T) {
	for _, p := range []poison{notJSON, nulEscape, hugeNumber, invalidUTF8} {
		t.Run(strings.ReplaceAll(p.name, " ", "_"), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				s := migrated(t, b)
				ctx := context.Background()
				good := upsert(skey("good"), inc1, 0, 2)
				badEvent := upsert(skey("bad-event"), inc1, 0, 3)
				badEvent.Events[1].Data = fmt.Appendf(nil, `{"author":"model","custom_metadata":{"x":%s}}`, p.value)
				badState := upsert(skey("bad-state"), inc1, 0, 2)
				badState.State["k"] = json.RawMessage(p.value)
				badUser := upsert(base.SessionRef{App: "app", User: "u2", ID: "s"}, inc1, 0, 1)
				// A session whose row is in the database already: its new
				// events are written although its new row is refused.
				apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("bad-known"), inc1, 0, 1)}})
				badKnown := upsert(skey("bad-known"), inc1, 2, 3)
				badKnown.State["k"] = json.RawMessage(p.value)
				batch := &Batch{
					Sessions: []SessionUpsert{good, badEvent, badState, badUser, badKnown},
					UserStates: []StateUpsert{
						{AppName: "app", UserID: "u1", Rev: 3, State: state(3), UpdateTime: eventTime(inc1, 3)},
						{AppName: "app", UserID: "u2", Rev: 2, State: map[string]json.RawMessage{"x": json.RawMessage(p.value)}, UpdateTime: eventTime(inc1, 1)},
					},
					AppStates: []StateUpsert{{AppName: "app", Rev: 5, State: state(5), UpdateTime: eventTime(inc1, 3)}},
				}
				if !refuses(b, p) {
					apply(t, s, batch)
					return
				}
				before := dump(t, s)
				err := s.Apply(ctx, batch)
				if err == nil || !IsPermanent(err) {
					t.Fatalf("Apply: got %v, want a permanent error", err)
				}
				same(t, "Apply wrote nothing", dump(t, s), before)

				rejected, err := s.ApplyEach(ctx, batch)
				must(t, err)
				var got []string
				for _, r := range rejected {
					if r.Err == nil || !IsPermanent(r.Err) {
						t.Errorf("rejected %v: error %v is not permanent", r, r.Err)
					}
					got = append(got, fmt.Sprintf("%s %s/%s/%s %s %d %v", r.Unit, r.Key.App, r.Key.User, r.Key.ID, r.EventID, r.Seq, r.EventsWritten))
				}
				slices.Sort(got)
				same(t, "rejected", got, []string{
					"event app/u1/bad-event " + eventID(inc1, 2) + " 2 false",
					"session app/u1/bad-known  0 true",
					"session app/u1/bad-state  0 false",
					"user state app/u2/  0 false",
				})

				same(t, "sessions", queryStrings(t, s.db, `SELECT id, CAST(state AS TEXT) FROM sessions ORDER BY id`), [][]string{
					{"bad-event", jsonText(s, `{"count":3,"gone":null}`)}, {"bad-known", jsonText(s, `{"count":1,"gone":null}`)},
					{"good", jsonText(s, `{"count":2,"gone":null}`)}, {"s", jsonText(s, `{"count":1,"gone":null}`)}})
				same(t, "events", queryStrings(t, s.db, `SELECT session_id, id FROM events ORDER BY session_id, "timestamp"`), [][]string{
					{"bad-event", eventID(inc1, 1)}, {"bad-event", eventID(inc1, 3)},
					{"bad-known", eventID(inc1, 1)}, {"bad-known", eventID(inc1, 2)}, {"bad-known", eventID(inc1, 3)},
					{"good", eventID(inc1, 1)}, {"good", eventID(inc1, 2)},
					{"s", eventID(inc1, 1)},
				})
				same(t, "bookkeeping", queryStrings(t, s.db, `SELECT session_id, rev FROM adksession_sessions ORDER BY session_id`),
					[][]string{{"bad-event", "3"}, {"bad-known", "1"}, {"good", "2"}, {"s", "1"}})
				// u2's {} row exists (its seed is fine), its snapshot was refused.
				same(t, "user states", queryStrings(t, s.db, `SELECT user_id, CAST(state AS TEXT) FROM user_states ORDER BY user_id`),
					[][]string{{"u1", jsonText(s, `{"nil":null,"rev":3}`)}, {"u2", "{}"}})
				same(t, "state bookkeeping", queryStrings(t, s.db, `SELECT app_name, user_id, rev FROM adksession_states ORDER BY user_id`),
					[][]string{{"app", "", "5"}, {"app", "u1", "3"}})
				same(t, "app state", queryStrings(t, s.db, `SELECT CAST(state AS TEXT) FROM app_states`),
					[][]string{{jsonText(s, `{"nil":null,"rev":5}`)}})

				// Replaying the batch changes nothing.
				after := dump(t, s)
				_, err = s.ApplyEach(ctx, batch)
				must(t, err)
				same(t, "replay", dump(t, s), after)
			})
		})
	}
}

// TestApplyEachTransient: an error that is not the data's fault (here a
// canceled context) writes nothing and is returned, not rejected.
func TestApplyEachTransient(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		before := dump(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rejected, err := s.ApplyEach(ctx, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 2)}})
		if err == nil || IsPermanent(err) || rejected != nil {
			t.Fatalf("ApplyEach: got %v, %v; want a transient error", rejected, err)
		}
		same(t, "nothing written", dump(t, s), before)
	})
}

// TestCreateState: the create-time state rides with the incarnation that
// carried it: kept by later batches of that incarnation, forgotten by a
// delete or a new incarnation.
func TestCreateState(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		ctx := context.Background()
		k := skey("s1")
		load := func(inc int64) string {
			t.Helper()
			m, ok, err := s.LoadCreateState(ctx, k, inc)
			must(t, err)
			if !ok {
				return "none"
			}
			out, err := json.Marshal(m)
			must(t, err)
			return string(out)
		}
		same(t, "unknown session", load(inc1), "none")
		u := upsert(k, inc1, 0, 0)
		u.CreateState = map[string]json.RawMessage{"c": json.RawMessage("4"), "n": json.RawMessage("null")}
		apply(t, s, &Batch{Sessions: []SessionUpsert{u}})
		same(t, "created", load(inc1), `{"c":4,"n":null}`)
		same(t, "other incarnation", load(inc2), "none")
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 1, 3)}})
		same(t, "kept by later batches", load(inc1), `{"c":4,"n":null}`)
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc2, 0, 1)}})
		same(t, "new incarnation without it", load(inc2), "none")
		same(t, "old incarnation gone", load(inc1), "none")
		u2 := upsert(k, inc2, 0, 1)
		u2.CreateState = map[string]json.RawMessage{}
		apply(t, s, &Batch{Sessions: []SessionUpsert{u2}})
		same(t, "empty create-time state", load(inc2), `{}`)
		apply(t, s, &Batch{Deletes: []SessionDelete{{k, inc2, 0}}})
		same(t, "deleted", load(inc2), "none")
	})
}

// TestIsPermanent: which errors the flusher gives up on.
func TestIsPermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", ErrInvalidBatch), true},
		{&json.SyntaxError{}, true},
		{context.Canceled, false},
		{errors.New("connection refused"), false},
	} {
		if got := IsPermanent(c.err); got != c.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
