package service

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// jsonValues are Go values as state deltas and custom metadata carry them:
// jsonWriter writes each as json.Marshal does, or fails as it does.
func jsonValues() []any {
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	vals := []any{nil, true, false, 0.0, math.Copysign(0, -1), 1.5, -2.25e-7, 1e-6, 1e21, 123456789012345678.0, math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), 0, -7, math.MaxInt64, int64(math.MinInt64), int32(3), uint8(4), float32(0.1),
		json.Number("12.50"), json.RawMessage(` { "a" : [1, 2] } `), []string{"x"}, []any(nil), map[string]any(nil), []byte("bytes"),
		[]any{1.0, "a", []any{}, map[string]any{}}, map[string]any{"b": 1.0, "a": []any{nil, "x<y"}, "\xff": "k", "é": map[string]any{"z": 0}},
		struct{ A int }{1}, cyclic, deepValue(maxValueDepth + 3)}
	for _, s := range fastStrings {
		vals = append(vals, s)
	}
	return vals
}

// deepValue is a value nested n levels deep.
func deepValue(n int) any {
	var v any = "leaf"
	for i := range n {
		if i%2 == 0 {
			v = []any{v}
		} else {
			v = map[string]any{"k": v}
		}
	}
	return v
}

func TestJSONWriterMatchesJSONMarshal(t *testing.T) {
	t.Parallel()
	for i, v := range jsonValues() {
		want, wantErr := json.Marshal(v)
		w := jsonWriter{buf: []byte("{")}
		w.member("k", v)
		if wantErr != nil {
			require.Error(t, w.err, "value %d: %#v", i, v)
			continue
		}
		require.NoError(t, w.err, "value %d: %#v", i, v)
		require.Equal(t, `{"k":`+string(want), string(w.buf), "value %d: %#v", i, v)
	}
}

func TestJSONWriterRaw(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{"a" : "<b>&\u2028"}`, "[\"\u2029\", 1 ,2]", `nul`, `{"a":1}x`, "\"\x00\"", `"x`, ` 1 `} {
		want, wantErr := json.Marshal(json.RawMessage(raw))
		var w jsonWriter
		w.raw("f", []byte(raw))
		require.Equal(t, wantErr == nil, w.err == nil, "%q: %v %v", raw, wantErr, w.err)
		if wantErr == nil {
			require.Equal(t, string(want), string(w.buf), "%q", raw)
		}
	}
}

// FuzzEventJSON: the event writer of an append writes the bytes of a
// reference that encodes every member with encoding/json, and so does
// json.Marshal(event) (Event.MarshalJSON, then encoding/json's compaction);
// for an event read from any JSON (API or storage form).
func FuzzEventJSON(f *testing.F) {
	for _, seed := range []string{
		`{"id":"e1","invocationId":"i1","author":"a","timestamp":1.5,"content":{"role":"model","parts":[{"text":"h\u00e9 <b> & \u2028"}]}}`,
		`{"id":"e2","author":"a","timestamp":1735787045.123456,"actions":{"stateDelta":{"user:k":[1,null,1e-7,1e21,-0],"x":{"b":1,"a":"\ud83d\ude00"}},"artifactDelta":{"f.txt":2}},"customMetadata":{"m":{"x":1}}}`,
		`{"id":"e4","author":"a","usageMetadata":{"totalTokenCount":3},"actions":{"requestedToolConfirmations":{"fc":{"hint":"h"}},"requestedAuthConfigs":{"a":null},"futureAction":true,"agentState":{"s" : 1},"compaction":[1]}}`,
		`{"id":"e5","invocation_id":"i","author":"a","timestamp":1735787045123.456,"actions":{"state_delta":{"k":1}}}`,
		`{"id":"e6","author":"a","branch":"b.c","errorCode":"E","errorMessage":"m\n","interrupted":true,"turnComplete":true,"partial":true,"longRunningToolIds":["a","<"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev Event
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		w := jsonWriter{}
		ev.write(&w)
		got, err := w.buf, w.err
		want, wantErr := referenceEventJSON(&ev)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v, reference %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if string(got) != string(want) {
			t.Fatalf("%s:\nwrote     %s\nreference %s", data, got, want)
		}
		again, err := json.Marshal(ev)
		if err != nil || string(again) != string(got) {
			t.Fatalf("%s: json.Marshal wrote %s (%v), the writer %s", data, again, err, got)
		}
	})
}

// referenceEventJSON is ADK's API form of e with every member encoded by
// encoding/json.
func referenceEventJSON(e *Event) ([]byte, error) {
	a := e.Actions
	actions, err := referenceObject([]referenceMember{
		{"stateDelta", nonNilMap(a.StateDelta), true}, {"artifactDelta", referenceNonNil(a.ArtifactDelta), true},
		{"requestedAuthConfigs", referenceNonNil(a.RequestedAuthConfigs), true},
		{"requestedToolConfirmations", referenceNonNil(a.RequestedToolConfirmations), true},
		{"transferToAgent", a.TransferToAgent, a.TransferToAgent != ""}, {"escalate", true, a.Escalate},
		{"skipSummarization", true, a.SkipSummarization}, {"endOfAgent", true, a.EndOfAgent},
		{"rewindBeforeInvocationId", a.RewindBeforeInvocationID, a.RewindBeforeInvocationID != ""},
		{"agentState", a.AgentState, len(a.AgentState) > 0}, {"compaction", a.Compaction, len(a.Compaction) > 0},
	}, a.Extra, actionKeys)
	if err != nil {
		return nil, err
	}
	return referenceObject([]referenceMember{
		{"id", e.ID, true}, {"invocationId", e.InvocationID, true}, {"author", e.Author, true}, {"branch", e.Branch, e.Branch != ""},
		{"timestamp", json.RawMessage(appendEpochSeconds(nil, e.Timestamp)), true}, {"partial", true, e.Partial},
		{"turnComplete", true, e.TurnComplete}, {"content", e.Content, len(e.Content) > 0}, {"actions", json.RawMessage(actions), true},
		{"longRunningToolIds", e.LongRunningToolIDs, e.LongRunningToolIDs != nil}, {"errorCode", e.ErrorCode, e.ErrorCode != ""},
		{"errorMessage", e.ErrorMessage, e.ErrorMessage != ""}, {"interrupted", true, e.Interrupted},
		{"customMetadata", e.CustomMetadata, e.CustomMetadata != nil},
	}, e.Extra, eventKeys)
}

// referenceMember is one member of an object: written when set.
type referenceMember struct {
	key string
	val any
	set bool
}

// referenceObject encodes members in order, then the extra members not
// known, sorted, each value by json.Marshal.
func referenceObject(members []referenceMember, extra map[string]json.RawMessage, known map[string]bool) ([]byte, error) {
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if !known[k] {
			members = append(members, referenceMember{k, extra[k], true})
		}
	}
	out := []byte("{")
	for _, m := range members {
		if !m.set {
			continue
		}
		if raw, ok := m.val.(json.RawMessage); ok && raw == nil {
			return nil, errors.New("empty raw member") // as json.Marshal of the member list would find it
		}
		k, _ := json.Marshal(m.key)
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, k...), ':'), v...)
	}
	return append(out, '}'), nil
}

func referenceNonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
