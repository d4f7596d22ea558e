package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/persist"
	"github.com/adksession/adksession/service"
)

// conflictLetter is the one dead letter of session k: a conflict naming
// the session and event id with reason, whose entry holds the event as
// Redis held it (with want in its JSON), counted by the flusher's dead
// letters (dead). Retrying it is refused, and it stays.
func (e *wbEnv) conflictLetter(k sessKey, id, reason, want string, dead func() int64) service.DeadLetter {
	e.t.Helper()
	letters := e.sessionLetters(k)
	require.Len(e.t, letters, 1, "one dead letter: the acknowledged event the database cannot take")
	d := letters[0]
	require.Equal(e.t, "event", d.Unit)
	require.Equal(e.t, "append", d.Kind)
	require.True(e.t, d.Conflict)
	require.Equal(e.t, fmt.Sprintf("event %s of session %s/%s/%s: %s", id, k.app, k.user, k.sid, reason), d.Reason)
	var rec struct {
		EventID string `json:"event_id"`
		Event   string `json:"event"`
	}
	require.NoError(e.t, json.Unmarshal([]byte(d.Entry), &rec))
	require.Equal(e.t, id, rec.EventID)
	require.Contains(e.t, rec.Event, want, "the letter keeps the event")
	require.EqualValues(e.t, 1, dead(), "counted as dead-lettered")

	err := e.svc.RetryDeadLetter(wbCtx(e.t), d.Shard, d.Entry)
	require.True(e.t, errors.Is(err, service.ErrInvalidArgument), "a conflict is not retried: %v", err)
	require.Len(e.t, e.sessionLetters(k), 1, "and stays")
	return d
}

// TestDeletedOnOlderCopyDeadLettered: a session is deleted in the database
// (Deleted), or deleted and created again (CreatedAgain), and Redis comes
// back with its older copy and the change log of then, which still holds
// e1's entry. e1 was deleted with its session: its entry, logged before the
// delete, is a replay and writes nothing. e2, appended to the copy after,
// is acknowledged: before, it was dropped at the flush with nothing naming
// it (the delete's later-incarnation check); now it is dead-lettered, a
// conflict, with the event. The database keeps what it holds.
func TestDeletedOnOlderCopyDeadLettered(t *testing.T) {
	t.Parallel()
	for _, again := range []bool{false, true} {
		name := "Deleted"
		if again {
			name = "CreatedAgain"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), func(c *service.Config) { c.DisableFlusher = true })
			ctx := wbCtx(t)
			f := newManualFlusher(t, e)
			k := sessKey{"app", "u", "s"}
			sk := e.sessionKeys(k.app, k.user, k.sid)
			sess := e.create(e.svc, k.app, k.user, k.sid, nil)
			f.drain()
			behindEvent(t, e.svc, sess, "e1", 1)
			log := e.keys.ShardKeys(e.keys.Shard(k.app, k.user)).Log
			keys := []string{sk.Session, sk.Events, sk.EventIDs, sk.Undo, sk.Temp, log}
			old := e.dumpKeys(keys...) // e1 in the copy, its entry not flushed yet
			f.drain()
			require.NoError(t, e.svc.Delete(ctx, &service.DeleteRequest{AppName: k.app, UserID: k.user, SessionID: k.sid}))
			f.drain()
			if again {
				created := e.create(e.svc, k.app, k.user, k.sid, map[string]any{"new": true})
				behindEvent(t, e.svc, created, "n1", 1)
				f.drain()
			}
			before := readDB(t, e.db)
			e.restoreKeys(old, keys...)

			read, err := e.svc.Get(ctx, &service.GetRequest{AppName: k.app, UserID: k.user, SessionID: k.sid})
			require.NoError(t, err)
			require.Equal(t, "e1", read.Session.Events().At(0).ID, "Redis serves its older copy")
			ev := &service.Event{ID: "e2", InvocationID: "inv-2", Author: "model",
				Actions: service.EventActions{StateDelta: map[string]any{"after-delete": true}}}
			require.NoError(t, e.svc.AppendEvent(ctx, read.Session, ev), "acknowledged by the copy")
			f.drain()

			rows := readDB(t, e.db)
			require.Equal(t, before.Events[k], rows.Events[k], "the database keeps what it holds")
			require.Equal(t, before.Sessions[k], rows.Sessions[k])
			if !again {
				require.NotContains(t, rows.Sessions, k, "deleted")
			}
			d := e.conflictLetter(k, "e2", persist.ReasonDeleted, `"after-delete":true`,
				func() int64 { return f.f.Stats().DeadLetters })
			require.False(t, strings.Contains(d.Entry, `"e1"`), "e1's entry, a replay, is no letter")
		})
	}
}
