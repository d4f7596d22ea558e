package service

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/eventjson"
)

func TestEventTimestampKeepsMicroseconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ts   time.Time
		json string
	}{
		{time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC), "1735787045.123456"},
		{time.Date(2025, 1, 2, 3, 4, 5, 1000, time.UTC), "1735787045.000001"},
		{time.Date(2025, 1, 2, 3, 4, 5, 999999000, time.UTC), "1735787045.999999"},
		{time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), "1735787045.000000"},
		{time.Date(1969, 12, 31, 23, 59, 59, 500000000, time.UTC), "-0.500000"},
	} {
		b, err := json.Marshal(Event{ID: "e", Timestamp: c.ts})
		require.NoError(t, err)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &top))
		require.Equal(t, c.json, string(top["timestamp"]))
		var back Event
		require.NoError(t, json.Unmarshal(b, &back))
		require.True(t, c.ts.Equal(back.Timestamp), "%s: got %s", c.json, back.Timestamp)
		require.Equal(t, c.ts.UnixMicro(), back.Timestamp.UnixMicro())
	}
}

func TestParseEpoch(t *testing.T) {
	t.Parallel()
	want := time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)
	for _, in := range []string{
		"1735787045.123456",   // API form / ADK Python: float seconds
		"1735787045123.456",   // ADK JS event_data: milliseconds
		"1.735787045123456e9", // seconds in exponent form
		"1735787045.1234559",  // rounds to the microsecond
		`"2025-01-02T03:04:05.123456Z"`,
		`"1735787045.123456"`,
	} {
		got, err := parseEpoch(json.RawMessage(in))
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	got, err := parseEpoch(json.RawMessage("1735787045"))
	require.NoError(t, err)
	require.Equal(t, want.Truncate(time.Second), got)
	got, err = parseEpoch(json.RawMessage("null"))
	require.NoError(t, err)
	require.True(t, got.IsZero())
	_, err = parseEpoch(json.RawMessage(`"yesterday"`))
	require.Error(t, err)
}

const apiFormEvent = `{
  "id": "ev-1", "invocationId": "e-1", "author": "agent", "branch": "a.b",
  "timestamp": 1735787045.123456, "partial": true, "turnComplete": true,
  "content": {"role": "model", "parts": [
    {"text": "hi"},
    {"functionCall": {"id": "fc", "name": "f", "args": {"snake_arg": 1, "camelArg": {"x_y": [1, 2]}}}},
    {"functionResponse": {"id": "fc", "name": "f", "response": {"out_put": "v"}}},
    {"inlineData": {"mimeType": "image/png", "data": "AAEC/w=="}}
  ]},
  "actions": {
    "stateDelta": {"k": 1, "user:u_v": null, "app:a": [1]},
    "artifactDelta": {"f.txt": 2},
    "requestedAuthConfigs": {},
    "requestedToolConfirmations": {},
    "transferToAgent": "t", "escalate": true, "skipSummarization": true, "endOfAgent": true,
    "rewindBeforeInvocationId": "e-0",
    "agentState": {"step_no": 3},
    "compaction": {"startTimestamp": 1.5},
    "futureAction": {"a": 1}
  },
  "longRunningToolIds": ["fc"],
  "errorCode": "E", "errorMessage": "boom", "interrupted": true,
  "customMetadata": {"my_key": {"nested_key": true}},
  "usageMetadata": {"totalTokenCount": 3},
  "futureField": [1, {"b": "c"}]
}`

func TestEventAPIFormRoundTrip(t *testing.T) {
	t.Parallel()
	var ev Event
	require.NoError(t, json.Unmarshal([]byte(apiFormEvent), &ev))
	require.Equal(t, "ev-1", ev.ID)
	require.Equal(t, "e-1", ev.InvocationID)
	require.Equal(t, "agent", ev.Author)
	require.Equal(t, "a.b", ev.Branch)
	require.Equal(t, time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC), ev.Timestamp)
	require.True(t, ev.Partial)
	require.True(t, ev.TurnComplete)
	require.True(t, ev.Interrupted)
	require.Equal(t, []string{"fc"}, ev.LongRunningToolIDs)
	require.Equal(t, map[string]any{"k": float64(1), "user:u_v": nil, "app:a": []any{float64(1)}}, ev.Actions.StateDelta)
	require.Equal(t, map[string]int64{"f.txt": 2}, ev.Actions.ArtifactDelta)
	require.Equal(t, "t", ev.Actions.TransferToAgent)
	require.True(t, ev.Actions.Escalate)
	require.True(t, ev.Actions.SkipSummarization)
	require.True(t, ev.Actions.EndOfAgent)
	require.Equal(t, "e-0", ev.Actions.RewindBeforeInvocationID)
	require.JSONEq(t, `{"step_no": 3}`, string(ev.Actions.AgentState))
	require.JSONEq(t, `{"a": 1}`, string(ev.Actions.Extra["futureAction"]))
	require.JSONEq(t, `[1, {"b": "c"}]`, string(ev.Extra["futureField"]))
	require.Equal(t, map[string]any{"my_key": map[string]any{"nested_key": true}}, ev.CustomMetadata)

	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.JSONEq(t, apiFormEvent, string(b))

	// Through a pointer too, and a second round is stable.
	b2, err := json.Marshal(&ev)
	require.NoError(t, err)
	require.Equal(t, string(b), string(b2))
	var again Event
	require.NoError(t, json.Unmarshal(b, &again))
	b3, err := json.Marshal(again)
	require.NoError(t, err)
	require.Equal(t, string(b), string(b3))
}

func TestEventStorageForm(t *testing.T) {
	t.Parallel()
	var api Event
	require.NoError(t, json.Unmarshal([]byte(apiFormEvent), &api))
	for name, ts := range map[string]string{
		"python seconds":  "1735787045.123456",
		"js milliseconds": "1735787045123.456",
	} {
		storage := `{
  "id": "ev-1", "invocation_id": "e-1", "author": "agent", "branch": "a.b",
  "timestamp": ` + ts + `, "partial": true, "turn_complete": true,
  "content": {"role": "model", "parts": [
    {"text": "hi"},
    {"function_call": {"id": "fc", "name": "f", "args": {"snake_arg": 1, "camelArg": {"x_y": [1, 2]}}}},
    {"function_response": {"id": "fc", "name": "f", "response": {"out_put": "v"}}},
    {"inline_data": {"mime_type": "image/png", "data": "AAEC/w=="}}
  ]},
  "actions": {
    "state_delta": {"k": 1, "user:u_v": null, "app:a": [1]},
    "artifact_delta": {"f.txt": 2},
    "requested_auth_configs": {},
    "requested_tool_confirmations": {},
    "transfer_to_agent": "t", "escalate": true, "skip_summarization": true, "end_of_agent": true,
    "rewind_before_invocation_id": "e-0",
    "agent_state": {"step_no": 3},
    "compaction": {"start_timestamp": 1.5},
    "future_action": {"a": 1}
  },
  "long_running_tool_ids": ["fc"],
  "error_code": "E", "error_message": "boom", "interrupted": true,
  "custom_metadata": {"my_key": {"nested_key": true}},
  "usage_metadata": {"total_token_count": 3},
  "future_field": [1, {"b": "c"}]
}`
		var ev Event
		require.NoError(t, json.Unmarshal([]byte(storage), &ev), name)
		require.Equal(t, api.Timestamp, ev.Timestamp, name)
		require.Equal(t, api.Actions.StateDelta, ev.Actions.StateDelta, name)
		require.Equal(t, api.CustomMetadata, ev.CustomMetadata, name)
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		require.JSONEq(t, apiFormEvent, string(b), name)
	}
}

func TestEventMinimal(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Event{ID: "x", Author: "user", Timestamp: time.Unix(1, 0)})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"x","invocationId":"","author":"user","timestamp":1.000000,
		"actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}}}`, string(b))

	// Nulls ADK writes for absent optional fields read as zero values.
	var ev Event
	require.NoError(t, json.Unmarshal([]byte(`{"id":"x","author":"user","timestamp":1.5,"branch":null,
		"content":null,"actions":null,"partial":null,"errorCode":null}`), &ev))
	require.Equal(t, Event{ID: "x", Author: "user", Timestamp: time.Unix(1, 500000000).UTC()}, ev)
}

func TestEventClone(t *testing.T) {
	t.Parallel()
	var ev Event
	require.NoError(t, json.Unmarshal([]byte(apiFormEvent), &ev))
	c := ev.Clone()
	require.Equal(t, ev, *c)
	c.Actions.StateDelta["new"] = 1
	delete(c.Actions.StateDelta, "k")
	c.Actions.ArtifactDelta["g"] = 1
	c.LongRunningToolIDs[0] = "changed"
	c.CustomMetadata["x"] = 1
	c.Extra["x"] = json.RawMessage("1")
	c.Actions.Extra["x"] = json.RawMessage("1")
	var orig Event
	require.NoError(t, json.Unmarshal([]byte(apiFormEvent), &orig))
	require.Equal(t, orig, ev, "changing a clone leaves the original as it was")
}

// TestEventCompactionForms: the compaction of each ADK round-trips through
// Event between its API form and the storage form (what the flusher writes
// to event_data) exactly: ADK Python's actions.compaction (EventCompaction,
// main bb56aa56) and ADK JS 2.0.0's CompactedEvent fields at the top level,
// snake_case as its DatabaseSessionService writes them.
func TestEventCompactionForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, api, storage string }{{
		name: "ADK Python actions.compaction",
		api: `{"id":"c1","invocationId":"inv","author":"user","timestamp":1768471216.016016,"actions":{"stateDelta":{},` +
			`"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{},"compaction":{"startTimestamp":1768471201.5,` +
			`"endTimestamp":1768471205.25,"compactedContent":{"parts":[{"text":"summary","thoughtSignature":"AQID"}],"role":"model"}}}}`,
		storage: `{"id":"c1","invocation_id":"inv","author":"user","timestamp":1768471216.016016,"actions":{"state_delta":{},` +
			`"artifact_delta":{},"requested_auth_configs":{},"requested_tool_confirmations":{},"compaction":{"start_timestamp":1768471201.5,` +
			`"end_timestamp":1768471205.25,"compacted_content":{"parts":[{"text":"summary","thought_signature":"AQID"}],"role":"model"}}}}`,
	}, {
		name: "ADK JS CompactedEvent",
		api: `{"id":"c2","invocationId":"inv","author":"system","timestamp":1768471216.016016,"content":{"role":"model",` +
			`"parts":[{"text":"summary"}]},"actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},` +
			`"requestedToolConfirmations":{}},"longRunningToolIds":[],"compactedContent":"summary","endTime":1768471205250,` +
			`"isCompacted":true,"isScratchpad":true,"startTime":1768471201500}`,
		storage: `{"id":"c2","invocation_id":"inv","author":"system","timestamp":1768471216.016016,"content":{"role":"model",` +
			`"parts":[{"text":"summary"}]},"actions":{"state_delta":{},"artifact_delta":{},"requested_auth_configs":{},` +
			`"requested_tool_confirmations":{}},"long_running_tool_ids":[],"compacted_content":"summary","end_time":1768471205250,` +
			`"is_compacted":true,"is_scratchpad":true,"start_time":1768471201500}`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			var ev Event
			require.NoError(t, json.Unmarshal([]byte(c.api), &ev))
			api, err := json.Marshal(ev)
			require.NoError(t, err)
			require.JSONEq(t, c.api, string(api))
			storage, err := eventjson.StorageForm(api)
			require.NoError(t, err)
			require.JSONEq(t, c.storage, string(storage))
			var back Event
			require.NoError(t, json.Unmarshal(storage, &back))
			require.Equal(t, ev, back)
		})
	}
}
