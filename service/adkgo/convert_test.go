package adkgo

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/tool/toolconfirmation"
	"google.golang.org/genai"

	"github.com/adksession/adksession/service"
)

// fullEvent is an adk-go event with every field of session.Event, of its
// model.LLMResponse and of its EventActions set (TestFullEventSetsEveryField
// keeps it so when adk-go adds fields).
func fullEvent() *session.Event {
	logprob := float32(-0.5)
	return &session.Event{
		LLMResponse: model.LLMResponse{
			Content: &genai.Content{Role: "model", Parts: []*genai.Part{
				{Text: "hello", Thought: true, ThoughtSignature: []byte{1, 2, 3}},
				{FunctionCall: &genai.FunctionCall{ID: "call-1", Name: "lookup", Args: map[string]any{"q": "x", "n": 2.0}}},
				{FunctionResponse: &genai.FunctionResponse{ID: "call-1", Name: "lookup", Response: map[string]any{"result": []any{"a", "b"}}}},
				{InlineData: &genai.Blob{MIMEType: "image/png", Data: []byte("\x89PNG\x00\xff")}},
			}},
			CitationMetadata:  &genai.CitationMetadata{Citations: []*genai.Citation{{Title: "t", URI: "https://example.com", StartIndex: 1, EndIndex: 4}}},
			GroundingMetadata: &genai.GroundingMetadata{WebSearchQueries: []string{"q1", "q2"}},
			UsageMetadata:     &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 3, CandidatesTokenCount: 4, TotalTokenCount: 7},
			CustomMetadata:    map[string]any{"k": "v", "n": 1.5, "nested": map[string]any{"list": []any{"x", true, nil}}},
			LogprobsResult: &genai.LogprobsResult{
				ChosenCandidates:  []*genai.LogprobsResultCandidate{{Token: "hi", LogProbability: logprob}},
				LogProbabilitySum: &logprob,
			},
			InputTranscription:      &genai.Transcription{Text: "in", Finished: true},
			OutputTranscription:     &genai.Transcription{Text: "out", LanguageCode: "en"},
			ModelVersion:            "gemini-test-001",
			Partial:                 true,
			TurnComplete:            true,
			Interrupted:             true,
			SessionResumptionHandle: "resume-1",
			ErrorCode:               "E42",
			ErrorMessage:            "something failed",
			FinishReason:            genai.FinishReasonStop,
			AvgLogprobs:             -0.25,
		},
		ID:             "event-1",
		Timestamp:      time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC),
		InvocationID:   "e-inv-1",
		Branch:         "root.child",
		IsolationScope: "task-7",
		Author:         "agent",
		Actions: session.EventActions{
			StateDelta:    map[string]any{"k": "v", "user:u": 1.0, "app:a": true, "gone": nil},
			ArtifactDelta: map[string]int64{"report.txt": 3},
			RequestedToolConfirmations: map[string]toolconfirmation.ToolConfirmation{
				"call-1": {Hint: "ok?", Confirmed: true, Payload: map[string]any{"amount": 10.0}},
			},
			SkipSummarization: true,
			TransferToAgent:   "other",
			Escalate:          true,
		},
		LongRunningToolIDs: []string{"call-1"},
		Routes:             []string{"approve", "notify"},
		RequestedInput: &session.RequestInput{
			InterruptID:    "ask-1",
			Message:        "approve?",
			ResponseSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ok": {Type: "boolean"}}},
			Payload:        map[string]any{"doc": "d1"},
		},
		Output:   map[string]any{"answer": 42.0},
		NodeInfo: &session.NodeInfo{Path: "wf/step@1", MessageAsOutput: true, OutputFor: []string{"wf/step@1", "wf"}},
	}
}

// TestFullEventSetsEveryField fails when adk-go's event types gain a field
// that fullEvent (and so the conversion) does not know about.
func TestFullEventSetsEveryField(t *testing.T) {
	e := fullEvent()
	for _, v := range []reflect.Value{reflect.ValueOf(*e), reflect.ValueOf(e.LLMResponse), reflect.ValueOf(e.Actions)} {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			require.False(t, v.Field(i).IsZero(), "%s.%s is not set in fullEvent: map it in convert.go and set it here", v.Type().Name(), f.Name)
		}
	}
}

// roundTrip converts e to adksession's event, through its JSON (what the
// cache stores) and back.
func roundTrip(t *testing.T, e *session.Event) (*session.Event, map[string]json.RawMessage) {
	t.Helper()
	s, err := toService(e)
	require.NoError(t, err)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &top))
	var back service.Event
	require.NoError(t, json.Unmarshal(b, &back))
	got, err := fromService(&back)
	require.NoError(t, err)
	return got, top
}

func TestConvertFullEventIsLossless(t *testing.T) {
	want := fullEvent()
	got, top := roundTrip(t, fullEvent())
	require.Equal(t, want, got)

	// The stored JSON uses ADK's API keys: adk-go's own JSON names, genai's
	// for content, ADK Python's where adk-go names a field differently.
	for _, k := range []string{"content", "citationMetadata", "groundingMetadata", "usageMetadata", "customMetadata",
		"logprobsResult", "inputTranscription", "outputTranscription", "modelVersion", "partial", "turnComplete",
		"interrupted", "liveSessionResumptionUpdate", "errorCode", "errorMessage", "finishReason", "avgLogprobs", "id",
		"timestamp", "invocationId", "branch", "isolationScope", "author", "actions", "longRunningToolIds",
		"requestedInput", "output", "nodeInfo"} {
		require.Contains(t, top, k)
	}
	require.JSONEq(t, `{"newHandle":"resume-1"}`, string(top["liveSessionResumptionUpdate"]))
	require.JSONEq(t, `{"role":"model","parts":[
		{"text":"hello","thought":true,"thoughtSignature":"AQID"},
		{"functionCall":{"id":"call-1","name":"lookup","args":{"q":"x","n":2}}},
		{"functionResponse":{"id":"call-1","name":"lookup","response":{"result":["a","b"]}}},
		{"inlineData":{"mimeType":"image/png","data":"iVBORwD/"}}]}`, string(top["content"]))
	var actions map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(top["actions"], &actions))
	require.JSONEq(t, `{"call-1":{"hint":"ok?","confirmed":true,"payload":{"amount":10}}}`, string(actions["requestedToolConfirmations"]))
	require.JSONEq(t, `{"k":"v","user:u":1,"app:a":true,"gone":null}`, string(actions["stateDelta"]))
	require.JSONEq(t, `["approve","notify"]`, string(actions["route"]))
	require.JSONEq(t, `{"path":"wf/step@1","messageAsOutput":true,"outputFor":["wf/step@1","wf"]}`, string(top["nodeInfo"]))
}

func TestConvertNilAndEmpty(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	tests := []struct {
		name string
		in   *session.Event
		want *session.Event // nil: want == in
	}{
		{name: "zero", in: &session.Event{ID: "e", Timestamp: ts}},
		{name: "empty but not nil", in: &session.Event{
			ID: "e", Timestamp: ts,
			LLMResponse: model.LLMResponse{
				Content:           &genai.Content{},
				CitationMetadata:  &genai.CitationMetadata{},
				GroundingMetadata: &genai.GroundingMetadata{},
				UsageMetadata:     &genai.GenerateContentResponseUsageMetadata{},
				CustomMetadata:    map[string]any{},
				LogprobsResult:    &genai.LogprobsResult{},
			},
			LongRunningToolIDs: []string{},
			Routes:             []string{},
			RequestedInput:     &session.RequestInput{},
			Output:             "",
		}},
		{
			// An all-zero NodeInfo is no workflow node's (adk-go decodes it
			// as nil too): ADK Python writes {"path": ""} on every event.
			name: "empty node info reads back nil",
			in:   &session.Event{ID: "e", Timestamp: ts, NodeInfo: &session.NodeInfo{}},
			want: &session.Event{ID: "e", Timestamp: ts},
		},
		{name: "output zero number", in: &session.Event{ID: "e", Timestamp: ts, Output: 0.0}},
		{name: "output empty map", in: &session.Event{ID: "e", Timestamp: ts, Output: map[string]any{}}},
		{
			// ADK's stored form always has these maps, so empty reads back as nil.
			name: "empty action maps read back nil",
			in: &session.Event{ID: "e", Timestamp: ts, Actions: session.EventActions{
				StateDelta: map[string]any{}, ArtifactDelta: map[string]int64{},
				RequestedToolConfirmations: map[string]toolconfirmation.ToolConfirmation{},
			}},
			want: &session.Event{ID: "e", Timestamp: ts},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = tt.in
			}
			got, _ := roundTrip(t, tt.in)
			require.Equal(t, want, got)
		})
	}
}

func TestConvertRefusesWhatJSONCannotHold(t *testing.T) {
	_, err := toService(&session.Event{ID: "e", Output: func() {}})
	require.ErrorIs(t, err, service.ErrInvalidArgument)
	require.ErrorContains(t, err, "output")
}

// TestConvertReadsPythonEvents: events as ADK Python answers them (bytes in
// URL-safe base64 without or with padding, its names for routes and the
// resumption handle) convert to adk-go's.
func TestConvertReadsPythonEvents(t *testing.T) {
	var ev service.Event
	require.NoError(t, json.Unmarshal([]byte(`{"id":"e","author":"a","timestamp":1.5,
		"content":{"role":"model","parts":[{"inlineData":{"data":"iVBORw0KGgr7_z4__77v","mimeType":"image/png"}},
			{"text":"t","thoughtSignature":"-_8"},{"functionResponse":{"name":"f","parts":[{"inlineData":{"data":"_w=="}}]}}]},
		"groundingMetadata":{"searchEntryPoint":{"sdkBlob":"-w"}},
		"nodeInfo":{"path":""},"liveSessionResumptionUpdate":{"newHandle":"h","resumable":true},
		"actions":{"route":"approve"}}`), &ev))
	got, err := fromService(&ev)
	require.NoError(t, err)
	png, err := base64.URLEncoding.DecodeString("iVBORw0KGgr7_z4__77v")
	require.NoError(t, err)
	require.Equal(t, png, got.Content.Parts[0].InlineData.Data)
	require.Equal(t, []byte{0xfb, 0xff}, got.Content.Parts[1].ThoughtSignature)
	require.Equal(t, []byte{0xff}, got.Content.Parts[2].FunctionResponse.Parts[0].InlineData.Data)
	require.Equal(t, []byte{0xfb}, got.GroundingMetadata.SearchEntryPoint.SDKBlob)
	require.Nil(t, got.NodeInfo)
	require.Equal(t, "h", got.SessionResumptionHandle)
	require.Equal(t, []string{"approve"}, got.Routes)

	// Events adksession stored before these names were shared.
	var old service.Event
	require.NoError(t, json.Unmarshal([]byte(`{"id":"e","author":"a","timestamp":1.5,"routes":["x"],"sessionResumptionHandle":"h0"}`), &old))
	got, err = fromService(&old)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, got.Routes)
	require.Equal(t, "h0", got.SessionResumptionHandle)
}
