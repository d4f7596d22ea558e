package integration

// What the bad-input rules let through (docs/design.md, "Bad input") is held
// alike by Redis and Postgres: values at the edges of each rule, flushed,
// read back once Redis has lost them, equal what Redis served, and the
// flusher dead-letters nothing.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

func TestEdgeValuesReadBackFromPostgres(t *testing.T) {
	t.Parallel()
	e := newWB(t, testenv.RedisURL(t), testenv.FreshDatabase(t), nil)
	ctx := wbCtx(t)
	edge := map[string]any{
		"replacement char": "\ufffd", "emoji": "😀 é €", "controls": "\u0001\u001f\t\n", "NUL as text": `\u0000`,
		"line separators": "\u2028\u2029", "html": "<a href='x'>&amp;</a>", "max": 1.7976931348623157e308,
		"tiny": 5e-324, "negative zero": -0.0, "big int": 9007199254740993.0, "nested": []any{map[string]any{"Key_Like": "x"}},
		"ключ": "значение",
	}
	state := map[string]any{}
	for k, v := range edge {
		state[k] = v
		state["user:"+k] = v
		state["app:"+k] = v
	}
	sess := e.create(e.svc, "app", "u", "s", state)
	events := []*service.Event{
		{InvocationID: "i1", Author: "agent é", Branch: "a.b", Timestamp: time.UnixMicro(0),
			Content: json.RawMessage(`{"role":"model","parts":[{"text":"\ufffd \ud83d\ude00 \u00e9 \\u0000 \u0001 \u2028"},` +
				`{"functionCall":{"id":"fc","name":"f","args":{"snake_key":[1e308,-0,1E-400,12345678901234567890]}}}]}`),
			Actions:        service.EventActions{StateDelta: edge, ArtifactDelta: map[string]int64{"my file.txt": 1}},
			CustomMetadata: map[string]any{"my_key": "\ufffd"},
			Extra:          map[string]json.RawMessage{"usageMetadata": json.RawMessage(`{"totalTokenCount":3,"x":"\ufffd"}`), "Author": json.RawMessage(`"other"`)},
		},
		{InvocationID: "i2", Author: "user", ErrorMessage: "\ufffd\u2028", Timestamp: time.UnixMicro(service.MaxTimestampMicros - 10),
			Actions: service.EventActions{RequestedAuthConfigs: map[string]json.RawMessage{"fc": json.RawMessage(
				`{"authScheme":{"type":"oauth2","flows":{"authorizationCode":{"tokenUrl":"t","scopes":{"read_api":"r"}}}}}`)},
				AgentState: json.RawMessage(`{"\ufffd":"\u0001"}`)}},
	}
	for _, ev := range events {
		require.NoError(t, e.svc.AppendEvent(ctx, sess, ev))
	}
	hot, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	e.flush(e.svc)
	backlog, err := e.svc.Backlog(ctx)
	require.NoError(t, err)
	require.Zero(t, backlog.Dead, "nothing the rules let through is refused by Postgres")
	require.Positive(t, e.wipeNamespace())

	cold, err := e.svc.Get(ctx, &service.GetRequest{AppName: "app", UserID: "u", SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, stateMap(hot.Session), stateMap(cold.Session), "state read back from Postgres")
	require.Equal(t, 2, cold.Session.Events().Len())
	for i := range 2 {
		want, err := json.Marshal(hot.Session.Events().At(i))
		require.NoError(t, err)
		got, err := json.Marshal(cold.Session.Events().At(i))
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got), "event %d read back from Postgres", i)
	}
	require.Equal(t, "other", string(must(cold.Session.Events().At(0).Extra["Author"])))
	require.Equal(t, "agent é", cold.Session.Events().At(0).Author)
}

// must is the JSON string a raw value holds.
func must(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	return s
}
