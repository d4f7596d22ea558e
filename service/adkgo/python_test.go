package adkgo

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/session"
	"google.golang.org/genai"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

const adkPythonRows = "../../persist/testdata/adk-python/rows.sql"

// TestADKPythonRowsThroughADKGo: an adk-go runner reads the sessions ADK
// Python wrote (bytes in URL-safe base64, ADK 2.x fields), and an adk-go
// event is stored under the keys ADK Python reads.
func TestADKPythonRowsThroughADKGo(t *testing.T) {
	ctx := t.Context()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, service.Migrate(ctx, dbURL))
	testenv.ExecSQLFile(t, dbURL, adkPythonRows)
	svc := openService(t, service.Config{RedisURL: testenv.RedisURL(t), DatabaseURL: dbURL,
		Namespace: testenv.UniqueName(t, "adkgo-py-")})
	s := New(svc)

	byID := map[string]*session.Event{}
	for _, k := range [][2]string{{"py-u1", "s-a"}, {"py-u1", "s-b"}, {"py-u2", "s-a"}, {"py-u3", "s-nobytes"}} {
		got, err := s.Get(ctx, &session.GetRequest{AppName: "adkpy-py", UserID: k[0], SessionID: k[1]})
		require.NoError(t, err, "%v", k)
		for ev := range got.Session.Events().All() {
			byID[ev.ID] = ev
		}
	}
	require.Len(t, byID, 74)

	png, err := base64.URLEncoding.DecodeString("iVBORw0KGgr7_z4__77v")
	require.NoError(t, err)
	inline := byID["py-py-u1-ev-inline_bytes"].Content.Parts[1].InlineData
	require.Equal(t, &genai.Blob{Data: png, DisplayName: "p.png", MIMEType: "image/png"}, inline)
	require.Equal(t, png, byID["py-py-u1-ev-thought"].Content.Parts[0].ThoughtSignature)
	require.Equal(t, png, byID["py-py-u2-ev-fn_response_parts"].Content.Parts[0].FunctionResponse.Parts[0].InlineData.Data)

	out := byID["py-py-u1-ev-node_output"]
	require.Equal(t, &session.NodeInfo{Path: "wf@1/A@1", OutputFor: []string{"wf@1/A@1", "wf@1"}, MessageAsOutput: true}, out.NodeInfo)
	require.Equal(t, map[string]any{"resultKey": map[string]any{"inner_key": 1.0}}, out.Output)
	require.Nil(t, byID["py-py-u1-ev-user_text"].NodeInfo, `ADK Python's {"path": ""} is no workflow node`)
	require.Equal(t, "fc-1", byID["py-py-u1-ev-isolation_scope"].IsolationScope)
	require.Nil(t, byID["py-py-u1-ev-workflow_v2"].Routes, `["approve", 2] is not a list of strings`)
	require.Equal(t, "h1", byID["py-py-u1-ev-live_fields"].SessionResumptionHandle)
	require.Equal(t, map[string]any{"turns": 1.0, "app:motd": "hello", "user:lang": "fr", "pending_call": nil,
		"nested": map[string]any{"camelKey": map[string]any{"inner_snake": []any{1.0, 2.5, nil}}}},
		byID["py-py-u1-ev-user_text"].Actions.StateDelta)

	// adk-go writes ADK Python's keys.
	h, err := s.Get(ctx, &session.GetRequest{AppName: "adkpy-py", UserID: "py-u1", SessionID: "s-b"})
	require.NoError(t, err)
	ev := &session.Event{ID: "go-1", InvocationID: "inv-go", Author: "go_agent", Timestamp: time.Now(),
		LLMResponse:    model.LLMResponse{SessionResumptionHandle: "h2", Content: genai.NewContentFromBytes(png, "image/png", genai.RoleModel)},
		IsolationScope: "fc-9", Output: map[string]any{"k": 1}, Routes: []string{"next"},
		NodeInfo: &session.NodeInfo{Path: "wf@1/B@1", MessageAsOutput: true}}
	require.NoError(t, s.AppendEvent(ctx, h.Session, ev))
	require.NoError(t, svc.Flush(ctx))
	db, err := sql.Open("postgres", dbURL)
	require.NoError(t, err)
	defer db.Close()
	var data string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT event_data::text FROM events WHERE id = 'go-1'`).Scan(&data))
	var row map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(data), &row))
	require.JSONEq(t, `{"path": "wf@1/B@1", "message_as_output": true}`, string(row["node_info"]))
	require.JSONEq(t, `{"k": 1}`, string(row["output"]))
	require.JSONEq(t, `"fc-9"`, string(row["isolation_scope"]))
	require.JSONEq(t, `{"new_handle": "h2"}`, string(row["live_session_resumption_update"]))
	require.JSONEq(t, `{"parts": [{"inline_data": {"data": "iVBORw0KGgr7_z4__77v", "mime_type": "image/png"}}], "role": "model"}`,
		string(row["content"]), "bytes as ADK Python writes them")
	require.JSONEq(t, `["next"]`, string(mustObject(t, row["actions"])["route"]))
	require.NotContains(t, row, "custom_metadata", "nothing adk-go writes needs a place ADK Python does not know")
}

func mustObject(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}
