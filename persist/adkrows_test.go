package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/adksession/adksession/cache/base"
)

// adkCreateTime is when the sessions that ADK wrote in these tests were
// created.
var adkCreateTime = time.Date(2024, 5, 6, 7, 8, 9, 654321000, time.UTC)

// adkEventTime is the column timestamp of event i of such a session.
func adkEventTime(i int) time.Time {
	return adkCreateTime.Add(time.Duration(i) * 1500 * time.Millisecond)
}

// pythonEvent is event_data as ADK Python writes it (Event.model_dump:
// snake_case, timestamp in float epoch seconds), with an id and invocation
// id that differ from the columns so that the test sees which one is read.
func pythonEvent(i int) string {
	return fmt.Sprintf(`{"content":{"parts":[{"text":"q%d"},{"function_call":{"id":"c1","name":"f","args":{"a":1}}}],"role":"user"},`+
		`"invocation_id":"json-inv","author":"user","actions":{"state_delta":{"user:x":%d},"artifact_delta":{},`+
		`"requested_auth_configs":{},"requested_tool_confirmations":{}},"id":"json-id","timestamp":%.6f}`,
		i, i, float64(adkEventTime(i).UnixMicro())/1e6)
}

// jsEvent is event_data as ADK JS 2.0.0 writes it: timestamp in epoch
// milliseconds, content keys possibly camelCase.
func jsEvent(i int) string {
	return fmt.Sprintf(`{"id":"json-id","invocation_id":"json-inv","author":"agent","content":{"role":"model",`+
		`"parts":[{"functionCall":{"name":"f","args":{"a":1}}},{"inlineData":{"mimeType":"text/plain","data":"aGk="}}]},`+
		`"actions":{"state_delta":{},"artifact_delta":{}},"timestamp":%d}`, adkEventTime(i).UnixMilli())
}

// insertADKSession writes a session of n events in ADK Python's shape,
// with no bookkeeping row, plus its app and user rows.
func insertADKSession(t *testing.T, s *Store, k base.SessionRef, n int) {
	insertADKRows(t, s.db, k, n, pythonEvent, formatTime)
}

// insertADKRows writes a session of n events with event_data event(i) and
// times formatted by tf, with no bookkeeping row, plus app and user rows.
func insertADKRows(t *testing.T, db rawDB, k base.SessionRef, n int, event func(int) string, tf func(time.Time) string) {
	t.Helper()
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.Exec(q, args...)
		must(t, err)
	}
	exec(`INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES ($1, $2, $3, $4, $5, $6)`,
		k.App, k.User, k.ID, `{"k": "v", "n": null}`, tf(adkCreateTime), tf(adkEventTime(n)))
	exec(`INSERT INTO app_states (app_name, state, update_time) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		k.App, `{"a": 1}`, tf(adkCreateTime))
	exec(`INSERT INTO user_states (app_name, user_id, state, update_time) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
		k.App, k.User, `{"x": 2}`, tf(adkCreateTime))
	for i := 1; i <= n; i++ {
		exec(`INSERT INTO events (id, app_name, user_id, session_id, invocation_id, "timestamp", event_data) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			fmt.Sprint("adk-", i), k.App, k.User, k.ID, fmt.Sprint("inv-", i), tf(adkEventTime(i)), event(i))
	}
}

func TestReadRowsADKWrote(t *testing.T) {
	for _, shape := range []struct {
		name  string
		event func(int) string
	}{{"python", pythonEvent}, {"js", jsEvent}} {
		t.Run(shape.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				s := migrated(t, b)
				k := skey("adk")
				insertADKRows(t, s.db, k, 3, shape.event, formatTime)
				checkADKSession(t, s, k, 3, shape.event)
			})
		})
	}
}

// checkADKSession checks that the session of n events that ADK wrote reads
// back with its columns' ids and times, its JSON as stored, and that Apply
// then continues it without losing its events.
func checkADKSession(t *testing.T, s *Store, k base.SessionRef, n int, event func(int) string) {
	t.Helper()
	ctx := context.Background()
	ls, err := s.LoadSession(ctx, k, Window{NumRecentEvents: 2})
	must(t, err)
	same(t, "incarnation", ls.Incarnation, adkCreateTime.UnixMicro())
	same(t, "rev", ls.Rev, int64(n))
	same(t, "times", []time.Time{ls.CreateTime, ls.UpdateTime}, []time.Time{adkCreateTime, adkEventTime(n)})
	same(t, "state", jsonValue(t, ls.State), map[string]any{"k": "v", "n": nil})
	same(t, "app state", jsonValue(t, ls.AppState), map[string]any{"a": float64(1)})
	same(t, "user state", jsonValue(t, ls.UserState), map[string]any{"x": float64(2)})
	same(t, "events", len(ls.Events), 2)
	for j, e := range ls.Events {
		i := n - 1 + j
		same(t, "event columns", []any{e.Key, e.ID, e.InvocationID, e.Timestamp, e.Seq},
			[]any{k, fmt.Sprint("adk-", i), fmt.Sprint("inv-", i), adkEventTime(i), int64(i)})
		var got, want any
		must(t, json.Unmarshal(e.Data, &got))
		must(t, json.Unmarshal([]byte(event(i)), &want))
		same(t, "event data as stored", got, want)
	}

	// adksession continues the session (cold-loaded into Redis, then
	// flushed): same incarnation, next rev.
	next := SessionUpsert{Key: k, Incarnation: ls.Incarnation, Rev: int64(n + 1),
		State: ls.State, CreateTime: ls.CreateTime, UpdateTime: adkEventTime(n + 1),
		Events: []EventRow{{ID: "ours", InvocationID: "inv-ours", Timestamp: adkEventTime(n + 1), Data: []byte(`{"author":"user"}`)}}}
	apply(t, s, &Batch{Sessions: []SessionUpsert{next}})
	events, err := s.LoadEvents(ctx, k, Window{}, 0)
	must(t, err)
	same(t, "events after Apply", eventIDs(events)[n-1:], []string{fmt.Sprint("adk-", n), "ours"})
	same(t, "event count", len(events), n+1)
	same(t, "last seq", events[n].Seq, int64(n+1))
}
