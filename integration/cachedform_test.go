package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestCachedEventLeavesOutEmptyActionMaps: Redis keeps an appended event
// without the maps of its actions that ADK writes on every event when they
// are empty (artifactDelta, requestedAuthConfigs, requestedToolConfirmations;
// docs/redis-keys.md), and keeps those that are not; a read returns them
// all, empty or not, warm and cold; the events row has all four maps, as
// ADK Python writes them; an event with an extra key that differs from "id"
// only in case keeps its own id in the row.
func TestCachedEventLeavesOutEmptyActionMaps(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	created, err := e.svc.Create(ctx, &service.CreateRequest{AppName: "cf", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	sess := created.Session
	plain := &service.Event{ID: "plain", InvocationID: "i1", Author: "user",
		Actions: service.EventActions{StateDelta: map[string]any{"k": 1}},
		Extra:   map[string]json.RawMessage{"ID": json.RawMessage(`"not-the-id"`)}}
	full := &service.Event{ID: "full", InvocationID: "i1", Author: "model",
		Actions: service.EventActions{ArtifactDelta: map[string]int64{"f.txt": 2},
			RequestedToolConfirmations: map[string]json.RawMessage{"fc": json.RawMessage(`{"hint":"h"}`)}}}
	require.NoError(t, e.svc.AppendEvent(ctx, sess, plain))
	require.NoError(t, e.svc.AppendEvent(ctx, sess, full))

	k := e.sessionKeys("cf", "u", "s")
	members, err := e.rdb.ZRange(ctx, k.Events, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 2)
	require.NotContains(t, members[0], `"artifactDelta"`)
	require.NotContains(t, members[0], `"requestedAuthConfigs"`)
	require.NotContains(t, members[0], `"requestedToolConfirmations"`)
	require.Contains(t, members[0], `"stateDelta":{"k":1}`)
	require.Contains(t, members[1], `"artifactDelta":{"f.txt":2}`)
	require.Contains(t, members[1], `"requestedToolConfirmations":{"fc":{"hint":"h"}}`)
	require.NotContains(t, members[1], `"requestedAuthConfigs"`)

	check := func(how string) {
		t.Helper()
		got, err := e.svc.Get(ctx, &service.GetRequest{AppName: "cf", UserID: "u", SessionID: "s"})
		require.NoError(t, err, how)
		evs := got.Session.Events()
		require.Equal(t, 2, evs.Len(), how)
		p, f := evs.At(0), evs.At(1)
		require.Equal(t, "plain", p.ID, how)
		require.NotNil(t, p.Actions.ArtifactDelta, how)
		require.Empty(t, p.Actions.ArtifactDelta, how)
		require.NotNil(t, p.Actions.RequestedAuthConfigs, how)
		require.NotNil(t, p.Actions.RequestedToolConfirmations, how)
		require.JSONEq(t, `"not-the-id"`, string(p.Extra["ID"]), how)
		require.Equal(t, map[string]int64{"f.txt": 2}, f.Actions.ArtifactDelta, how)
		require.JSONEq(t, `{"hint":"h"}`, string(f.Actions.RequestedToolConfirmations["fc"]), how)
		b, err := json.Marshal(p)
		require.NoError(t, err)
		require.Contains(t, string(b), `"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}`, how)
	}
	check("warm")

	e.flush(e.svc)
	rows, err := e.db.QueryContext(ctx, `SELECT id, event_data FROM events WHERE app_name = 'cf' AND user_id = 'u' AND session_id = 's' ORDER BY "timestamp"`)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		var data []byte
		require.NoError(t, rows.Scan(&id, &data))
		ids = append(ids, id)
		var row struct {
			ID      string                     `json:"id"`
			Actions map[string]json.RawMessage `json:"actions"`
		}
		require.NoError(t, json.Unmarshal(data, &row))
		require.Equal(t, id, row.ID)
		for _, m := range []string{"state_delta", "artifact_delta", "requested_auth_configs", "requested_tool_confirmations"} {
			require.Contains(t, row.Actions, m, "row %s: %s", id, data)
		}
		if id == "plain" {
			require.JSONEq(t, `{}`, string(row.Actions["artifact_delta"]))
			require.True(t, strings.Contains(string(data), "not-the-id"), "the extra key stays in the row: %s", data)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"plain", "full"}, ids)

	require.NoError(t, e.rdb.Del(ctx, k.Session, k.Events, k.EventIDs, k.Undo).Err())
	check("cold")
}
