package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// storedEvents lists the ids of the events the database holds of k, in
// timestamp order, with their timestamps.
func storedEvents(t *testing.T, s *Store, k base.SessionRef) ([]string, []time.Time) {
	t.Helper()
	rows, err := s.LoadEvents(context.Background(), k, Window{}, 0)
	must(t, err)
	var ids []string
	var times []time.Time
	for _, e := range rows {
		ids = append(ids, e.ID)
		times = append(times, e.Timestamp)
	}
	return ids, times
}

// requireAfterE8 checks that the database holds e1..e8 of k, then the new
// event id moved after e8, at rev 9, with the database's session state
// (upsert's of 8) and the new event's k = v, updated at the new event's
// time; it returns the session as loaded.
func requireAfterE8(t *testing.T, s *Store, k base.SessionRef, id, v string) *LoadedSession {
	t.Helper()
	ids, times := storedEvents(t, s, k)
	same(t, "events", ids, []string{eventID(inc1, 1), eventID(inc1, 2), eventID(inc1, 3), eventID(inc1, 4), eventID(inc1, 5),
		eventID(inc1, 6), eventID(inc1, 7), eventID(inc1, 8), id})
	same(t, "moved after the database's newest", times[8], eventTime(inc1, 8).Add(time.Microsecond))
	ls, err := s.LoadSession(context.Background(), k, Window{})
	must(t, err)
	same(t, "rev", ls.Rev, int64(9))
	same(t, "session state: the database's, then the new delta", jsonValue(t, ls.State),
		map[string]any{"count": float64(8), "gone": nil, "k": v})
	same(t, "update time", ls.UpdateTime, times[8])
	return ls
}

// TestApplyRebasesNumberedOver: Redis came back behind the database (it
// holds e1..e6 and numbers a new event 7; the database holds e1..e8). The
// new event goes after e8 (its time moved past e8's), the session's state
// is the database's with the new delta, the user's too, the rev counts
// 9 events; replaying the batch changes nothing.
func TestApplyRebasesNumberedOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		k := skey("s1")
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 8)},
			UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 5, State: map[string]json.RawMessage{"u": json.RawMessage(`"x5"`), "keep": json.RawMessage(`1`)}, UpdateTime: eventTime(inc1, 8)}}})

		behind := upsert(k, inc1, 1, 7)
		behind.Flushed = 6
		behind.State = map[string]json.RawMessage{"count": json.RawMessage(`6`), "k": json.RawMessage(`"n7"`)}
		behind.Events = behind.Events[:6]
		behind.Events = append(behind.Events, EventRow{ID: "new-7", InvocationID: "inv-new", Seq: 7, Timestamp: eventTime(inc1, 7),
			Data: []byte(`{"author":"model","actions":{"state_delta":{"k":"n7","user:u":"n7","app:a":7},"artifact_delta":{}}}`)})
		behindUser := StateUpsert{AppName: "app", UserID: "u1", Rev: 4, State: map[string]json.RawMessage{"u": json.RawMessage(`"n7"`)}, UpdateTime: eventTime(inc1, 7)}
		batch := &Batch{Sessions: []SessionUpsert{behind}, UserStates: []StateUpsert{behindUser}}
		apply(t, s, batch)
		same(t, "outcome", batch.Outcome, Outcome{Rebased: []base.SessionRef{k}, RebasedUsers: []base.SessionRef{{App: "app", User: "u1"}},
			Updated: map[base.SessionRef]time.Time{k: eventTime(inc1, 8).Add(time.Microsecond)}})

		ls := requireAfterE8(t, s, k, "new-7", "n7")
		same(t, "user state: the database's, then the new delta", jsonValue(t, ls.UserState),
			map[string]any{"u": "n7", "keep": float64(1)})

		d := dump(t, s)
		apply(t, s, &Batch{Sessions: []SessionUpsert{behind}, UserStates: []StateUpsert{behindUser}})
		same(t, "replaying the batch", dump(t, s), d)
	})
}

// TestApplyRebasesMarkedCopy: the batch of a copy the flusher rebased and
// kept (SessionUpsert.Rebase: m:rb) numbers its new event 9, above the
// row's rev 8, at a time before the database's newest: the copy counted an
// event it stored again where the database counts its own (simulation seed
// 643912492160). It is rebased all the same: the event after e8, the
// session's state the database's with its delta, the rev counting 9
// events; replaying the batch changes nothing.
func TestApplyRebasesMarkedCopy(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := migrated(t, b)
		k := skey("s1")
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 8)}})

		marked := upsert(k, inc1, 9, 9)
		marked.Flushed, marked.Rebase = 8, true
		marked.State = map[string]json.RawMessage{"k": json.RawMessage(`"n9"`)}
		at := eventTime(inc1, 6).Add(time.Microsecond)
		marked.UpdateTime = at
		marked.Events[0].ID, marked.Events[0].Timestamp = "new-9", at
		marked.Events[0].Data = []byte(`{"author":"model","actions":{"state_delta":{"k":"n9"},"artifact_delta":{}}}`)
		user := StateUpsert{AppName: "app", UserID: "u1", Rev: 2, State: map[string]json.RawMessage{}, UpdateTime: at}
		batch := &Batch{Sessions: []SessionUpsert{marked}, UserStates: []StateUpsert{user}}
		apply(t, s, batch)
		same(t, "rebased", batch.Outcome.Rebased, []base.SessionRef{k})

		requireAfterE8(t, s, k, "new-9", "n9")

		// A replay keeps the session's rows. (It is rebased again: its
		// event, held later than its copy's time, at the row's rev, cannot
		// be told from one stored again earlier (numberedOver), and the
		// user's row is written again with the same state, a rev higher.)
		d := dump(t, s)
		apply(t, s, &Batch{Sessions: []SessionUpsert{marked}, UserStates: []StateUpsert{user}})
		again := dump(t, s)
		for _, table := range []string{"events", "sessions", "adksession_sessions"} {
			same(t, "replaying the batch: "+table, again[table], d[table])
		}
	})
}

// TestApplyStoredAgain: Redis came back with an older copy that lacks the
// database's last event e3, and e3's id was sent again through a handle read
// from that copy: the copy stored it again, at the database's seq 3 but at
// a new time, over its older state. Its batch holds only an event the
// database holds, so it looks like a replay; but the time says the copy is
// behind: the session is rebased (its row keeps the database's state and
// update time, e3 is not written again) and its copy let go of. A replay of
// the batch the database wrote (the same times) is still a replay. So is
// one whose event_data holds the same event in another form; but another
// event under e3's id, stored by the copy at e3's very time, is not.
func TestApplyStoredAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := migrated(t, b)
		k := skey("s1")
		first := upsert(k, inc1, 0, 3)
		apply(t, s, &Batch{Sessions: []SessionUpsert{first}})
		before, err := s.LoadSession(ctx, k, Window{})
		must(t, err)
		d := dump(t, s)
		replay := &Batch{Sessions: []SessionUpsert{first}}
		apply(t, s, replay)
		// The replay's row is planned as it is: its update time, unchanged.
		same(t, "a replay's update time", replay.Outcome.Updated[k], first.UpdateTime)
		replay.Outcome.Updated = nil
		same(t, "a replay's outcome", replay.Outcome, Outcome{})
		same(t, "a replay changes nothing", dump(t, s), d)

		again := upsert(k, inc1, 3, 3)
		again.Flushed = 2
		again.Events[0].Timestamp = eventTime(inc1, 3).Add(5 * time.Second)
		again.UpdateTime = again.Events[0].Timestamp
		again.State = map[string]json.RawMessage{"count": json.RawMessage(`2`)} // the older copy's
		batch := &Batch{Sessions: []SessionUpsert{again}}
		apply(t, s, batch)
		// The rebased row keeps the database's update time (e3's, the first batch's).
		same(t, "outcome", batch.Outcome, Outcome{Rebased: []base.SessionRef{k}, RebasedUsers: []base.SessionRef{{App: "app", User: "u1"}},
			Updated: map[base.SessionRef]time.Time{k: first.UpdateTime}})
		ids, times := storedEvents(t, s, k)
		same(t, "events", ids, []string{eventID(inc1, 1), eventID(inc1, 2), eventID(inc1, 3)})
		same(t, "e3 at its stored time", times[2], eventTime(inc1, 3))
		ls, err := s.LoadSession(ctx, k, Window{})
		must(t, err)
		same(t, "rev", ls.Rev, int64(3))
		same(t, "state: the database's", jsonValue(t, ls.State), jsonValue(t, before.State))
		same(t, "update time: the database's", ls.UpdateTime, before.UpdateTime)

		// e3's id reused for another event, which the copy stored at
		// exactly the database's time for it: not a replay (simulation seed
		// 953023679376: the row took the copy's state). The database keeps
		// its own e3, and the row its state.
		other := upsert(k, inc1, 3, 3)
		other.Flushed = 2
		other.Events[0].Data = []byte(`{"author":"user","invocation_id":"other","actions":{"state_delta":{"other":true}}}`)
		other.State = map[string]json.RawMessage{"count": json.RawMessage(`2`), "other": json.RawMessage(`true`)}
		batch = &Batch{Sessions: []SessionUpsert{other}}
		apply(t, s, batch)
		same(t, "other content: rebased", batch.Outcome.Rebased, []base.SessionRef{k})
		ids, times = storedEvents(t, s, k)
		same(t, "events, other content", ids, []string{eventID(inc1, 1), eventID(inc1, 2), eventID(inc1, 3)})
		same(t, "e3 at its stored time, other content", times[2], eventTime(inc1, 3))
		ls, err = s.LoadSession(ctx, k, Window{})
		must(t, err)
		same(t, "state: the database's, not the other event's", jsonValue(t, ls.State), jsonValue(t, before.State))
		same(t, "update time: the database's, other content", ls.UpdateTime, before.UpdateTime)
		same(t, "e3 as the database holds it", string(ls.Events[2].Data), string(before.Events[2].Data))
		// The same content in another form (keys in another order, another
		// number form, escapes) is a replay: it writes nothing.
		d = dump(t, s)
		replay = &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 3, 3)}}
		replay.Sessions[0].Events[0].Data = []byte(`{"custom_metadata":{"x y":[1.0, 20e-1]},"timestamp":7,` +
			`"actions":{"requested_tool_confirmations":{},"requested_auth_configs":{},"artifact_delta":{},` +
			`"state_delta":{"k":null,"user:u":"x","app:a":3}},"content":{"parts":[{"text":"reply 3 \u003cb\u003e&\u003c/b\u003e \u00e9"},` +
			`{"function_call":{"args":{"camelKey":1},"name":"f"}}],"role":"model"},"author":"model"}`)
		apply(t, s, replay)
		same(t, "a replay in another form: not rebased", replay.Outcome.Rebased, []base.SessionRef(nil))
		same(t, "a replay in another form changes nothing", dump(t, s), d)
	})
}

// TestApplyLateEvents: a session's row was refused with e1 and e2, then e3
// was written; the retried e1 and e2 (in either order) go in at their own
// times, the row stays as the database holds it.
func TestApplyLateEvents(t *testing.T) {
	for _, order := range [][2]int64{{1, 2}, {2, 1}} {
		t.Run(fmt.Sprintf("e%d_then_e%d", order[0], order[1]), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				ctx := context.Background()
				s := migrated(t, b)
				k := skey("s1")
				apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 3, 3)}})
				before, err := s.LoadSession(ctx, k, Window{})
				must(t, err)
				for _, seq := range order {
					apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, seq, seq)}})
				}
				ids, _ := storedEvents(t, s, k)
				same(t, "events", ids, []string{eventID(inc1, 1), eventID(inc1, 2), eventID(inc1, 3)})
				ls, err := s.LoadSession(ctx, k, Window{})
				must(t, err)
				same(t, "rev", ls.Rev, int64(3))
				same(t, "state kept", jsonValue(t, ls.State), jsonValue(t, before.State))
				same(t, "update time kept", ls.UpdateTime, before.UpdateTime)
			})
		})
	}
}

// TestApplyRebasedUserWrites: a user whose Redis hash is an older copy (its
// flush count at or below the database's) is rebased with the user: writes
// no event of the batch carries (Batch.UserWrites: a create's initial keys,
// the events of a session deleted before the batch read it), in log order,
// but for those whose change the database holds already.
func TestApplyRebasedUserWrites(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := migrated(t, b)
		apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(skey("s1"), inc1, 0, 2)},
			UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: 5, State: map[string]json.RawMessage{"u": json.RawMessage(`"db"`), "keep": json.RawMessage(`1`)},
				UpdateTime: eventTime(inc1, 2), Flush: 3}}})

		// Each write sets u (the last in log order wins) and a key of its own.
		write := func(sid string, inc, seq int64, pos int) UserWrite {
			name := fmt.Sprintf("%s-%d", sid, seq)
			w := UserWrite{Key: skey(sid), Incarnation: inc, Seq: seq, LogPos: pos,
				Delta: map[string]json.RawMessage{"u": json.RawMessage(`"` + name + `"`), name: json.RawMessage(`1`)}}
			if seq > 0 {
				w.Ts = eventTime(inc, seq).UnixMicro()
			}
			return w
		}
		// An event of Redis's older copy at a seq the database gave another
		// event: at another time.
		over := write("s1", inc1, 2, 5)
		over.Ts++
		over.Delta = map[string]json.RawMessage{"over": json.RawMessage(`1`)}
		// One at that seq and at the very time of the database's event: told
		// apart by its id (simulation seed 970678225580). The database's own
		// event under its id is held at any time.
		overSameTime := write("s1", inc1, 2, 6)
		overSameTime.EventID = "another-event"
		overSameTime.Delta = map[string]json.RawMessage{"same-time": json.RawMessage(`1`)}
		heldByID := write("s1", inc1, 2, 7)
		heldByID.EventID, heldByID.Ts = eventID(inc1, 2), heldByID.Ts+5
		heldByID.Delta = map[string]json.RawMessage{"u": json.RawMessage(`"replayed by id"`)}
		older := []StateUpsert{{AppName: "app", UserID: "u1", Rev: 2, State: map[string]json.RawMessage{"u": json.RawMessage(`"older copy"`)},
			UpdateTime: eventTime(inc1, 3), Flush: 2}}
		inc2 := inc1 + 1000
		batch := &Batch{
			Deletes:    []SessionDelete{{Key: skey("s3"), Incarnation: inc2}},
			UserStates: older,
			UserWrites: []UserWrite{
				write("s1", inc1, 0, 0), // held: its session is, at this incarnation
				write("s1", inc1, 2, 1), // held: its seq is
				write("s2", inc2, 0, 2),
				write("s3", inc2, 1, 4), // after s1's e3 in the log
				write("s1", inc1, 3, 3),
				over,
				overSameTime,
				heldByID,
			},
		}
		apply(t, s, batch)
		same(t, "outcome", batch.Outcome, Outcome{RebasedUsers: []base.SessionRef{{App: "app", User: "u1"}}})
		want := map[string]any{"u": "s3-1", "keep": float64(1), "s2-0": float64(1), "s3-1": float64(1), "s1-3": float64(1), "over": float64(1),
			"same-time": float64(1)}
		got, _, err := s.LoadUserState(ctx, "app", "u1")
		must(t, err)
		same(t, "user state: the database's, then the writes it lacked, in log order", jsonValue(t, got), want)

		// The delete is held now: a replay of its session's write changes nothing.
		replay := write("s3", inc2, 1, 0)
		replay.Delta["keep"] = json.RawMessage(`"replayed"`)
		apply(t, s, &Batch{UserStates: older, UserWrites: []UserWrite{replay}})
		got, _, err = s.LoadUserState(ctx, "app", "u1")
		must(t, err)
		same(t, "after a replay", jsonValue(t, got), want)
	})
}

// TestApplyRecordsCountOfSkippedSnapshot: a user's snapshot that is not
// newer than the row is not written, but its flush count (the flusher's
// read, counted in Redis) is recorded, by Apply and by ApplyEach: a copy
// of the hash from before that read, whose next count is at or below it,
// is then rebased onto the row (simulation seed 999150698881).
func TestApplyRecordsCountOfSkippedSnapshot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, each := range []bool{false, true} {
			t.Run(fmt.Sprint("each=", each), func(t *testing.T) {
				ctx := context.Background()
				s := migrated(t, b)
				user := func(v string, rev, flush int64) []StateUpsert {
					return []StateUpsert{{AppName: "app", UserID: "u1", Rev: rev, State: map[string]json.RawMessage{"k": json.RawMessage(`"` + v + `"`)},
						UpdateTime: eventTime(inc1, 1), Flush: flush}}
				}
				apply(t, s, &Batch{UserStates: user("db", 5, 3)})
				skipped := &Batch{UserStates: user("db", 5, 6)}
				if each {
					rejected, err := s.ApplyEach(ctx, skipped)
					must(t, err)
					same(t, "rejected", len(rejected), 0)
				} else {
					apply(t, s, skipped)
				}
				// The copy read at count 4, 5 or 6 before: its next read counts 6.
				older := &Batch{UserStates: user("older copy", 5, 6)}
				apply(t, s, older)
				same(t, "outcome", older.Outcome.RebasedUsers, []base.SessionRef{{App: "app", User: "u1"}})
				got, _, err := s.LoadUserState(ctx, "app", "u1")
				must(t, err)
				same(t, "user state", jsonValue(t, got), map[string]any{"k": "db"})
			})
		}
	})
}

// TestApplyRebasesUserByRecordedCount: a user's hash that Redis counted
// reads of past the database's count, in batches that never committed,
// tells an older copy by the count it knew recorded (StateUpsert.Recorded,
// m:fr): at or below the database's, the row is rebased (simulation seed
// 804113261009: Postgres down for 30 s after a restart from an RDB
// snapshot, every retry read the hash again); above it, the snapshot is
// written as it is.
func TestApplyRebasesUserByRecordedCount(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := migrated(t, b)
		user := func(v string, rev, flush, recorded int64) *Batch {
			return &Batch{UserStates: []StateUpsert{{AppName: "app", UserID: "u1", Rev: rev, State: map[string]json.RawMessage{"k": json.RawMessage(`"` + v + `"`)},
				UpdateTime: eventTime(inc1, 1), Flush: flush, Recorded: recorded}}}
		}
		apply(t, s, user("db", 5, 3, 3))
		older := user("older copy", 5, 9, 3) // read at 4..8 by batches that failed
		apply(t, s, older)
		same(t, "outcome", older.Outcome.RebasedUsers, []base.SessionRef{{App: "app", User: "u1"}})
		got, _, err := s.LoadUserState(ctx, "app", "u1")
		must(t, err)
		same(t, "user state", jsonValue(t, got), map[string]any{"k": "db"})

		live := user("live", 6, 10, 10) // the database records 9: this hash knew it
		apply(t, s, live)
		same(t, "outcome", live.Outcome.RebasedUsers, []base.SessionRef(nil))
		got, _, err = s.LoadUserState(ctx, "app", "u1")
		must(t, err)
		same(t, "user state", jsonValue(t, got), map[string]any{"k": "live"})
	})
}

// TestApplyRebasedUserKeepsHashRev: a session Redis numbered over the
// database's is rebased, and so is its user, whose hash in Redis is not
// behind by its flush count. The user's row takes the revision the hash had
// when it was read (the hash numbers its next writes from it), so the
// hash's next snapshot is written, not taken for one the row holds
// (simulation seed 611470501151: a user: write lost). A user rebased
// without a snapshot (Redis held no hash) keeps the row's revision.
func TestApplyRebasedUserKeepsHashRev(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, snapshot := range []bool{true, false} {
			t.Run(fmt.Sprint("snapshot=", snapshot), func(t *testing.T) {
				ctx := context.Background()
				s := migrated(t, b)
				k := skey("s1")
				user := func(rev, flush int64, kv ...string) StateUpsert {
					st := map[string]json.RawMessage{}
					for i := 0; i < len(kv); i += 2 {
						st[kv[i]] = json.RawMessage(`"` + kv[i+1] + `"`)
					}
					return StateUpsert{AppName: "app", UserID: "u1", Rev: rev, State: st, UpdateTime: eventTime(inc1, 8), Flush: flush}
				}
				apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 8)}, UserStates: []StateUpsert{user(5, 3, "u", "db")}})

				behind := upsert(k, inc1, 1, 7)
				behind.Flushed = 6
				behind.Events = append(behind.Events[:6], EventRow{ID: "new-7", InvocationID: "inv-new", Seq: 7, Timestamp: eventTime(inc1, 7),
					Data: []byte(`{"author":"model","actions":{"state_delta":{"k":"n7"},"artifact_delta":{}}}`)})
				batch := &Batch{Sessions: []SessionUpsert{behind}}
				if snapshot {
					batch.UserStates = []StateUpsert{user(5, 4, "u", "db")}
				}
				apply(t, s, batch)
				same(t, "rebased users", batch.Outcome.RebasedUsers, []base.SessionRef{{App: "app", User: "u1"}})
				_, v, err := s.LoadUserState(ctx, "app", "u1")
				must(t, err)
				same(t, "user state revision: the hash's (the row's without one)", v.Rev, int64(5))
				if !snapshot {
					return
				}
				// The hash's next write, at rev 6, counted above the database.
				apply(t, s, &Batch{UserStates: []StateUpsert{user(6, 5, "u", "db", "w", "later")}})
				got, v, err := s.LoadUserState(ctx, "app", "u1")
				must(t, err)
				same(t, "user state after the hash's next write", jsonValue(t, got), map[string]any{"u": "db", "w": "later"})
				same(t, "its revision", v.Rev, int64(6))
			})
		}
	})
}
