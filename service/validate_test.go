package service

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/eventjson"
)

// testService is a Service with default limits and no connections: enough
// for validation.
func testService(t testing.TB, tweak func(*Config)) *Service {
	t.Helper()
	c := Config{RedisURL: "redis://unused"}
	if tweak != nil {
		tweak(&c)
	}
	cfg, err := c.withDefaults()
	require.NoError(t, err)
	return &Service{cfg: cfg}
}

// badEvents are events AppendEvent refuses, each with what its error names.
func badEvents() map[string]struct {
	ev   *Event
	want string
} {
	delta := func(d map[string]any) *Event { return &Event{Author: "a", Actions: EventActions{StateDelta: d}} }
	content := func(js string) *Event { return &Event{Author: "a", Content: json.RawMessage(js)} }
	return map[string]struct {
		ev   *Event
		want string
	}{
		"timestamp 9999":            {&Event{Timestamp: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}, "event.Timestamp: 9999-12-31T00:00:00Z is outside [1970-01-01, 2200-01-01) UTC"},
		"timestamp 2200":            {&Event{Timestamp: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, "event.Timestamp: 2200-01-01T00:00:00Z is outside"},
		"timestamp 1969":            {&Event{Timestamp: time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC)}, "event.Timestamp: 1969-12-31T23:59:59.999999999Z is outside"},
		"timestamp year 1":          {&Event{Timestamp: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}, "event.Timestamp"},
		"NUL user value":            {delta(map[string]any{"user:x": "a\x00b"}), `actions.stateDelta["user:x"]: contains NUL`},
		"NUL deep value":            {delta(map[string]any{"k": []any{1, 2, map[string]any{"name": "\x00"}}}), `actions.stateDelta["k"][2].name: contains NUL`},
		"NUL temp value":            {delta(map[string]any{"temp:t": []string{"\x00"}}), `actions.stateDelta["temp:t"][0]: contains NUL`},
		"NUL app value":             {delta(map[string]any{"app:a": map[string]string{"x y": "\x00"}}), `actions.stateDelta["app:a"]["x y"]: contains NUL`},
		"NUL key":                   {delta(map[string]any{"a\x00": 1}), `actions.stateDelta key "a\x00": contains NUL`},
		"NUL nested key":            {delta(map[string]any{"k": map[string]any{"\x00": 1}}), `actions.stateDelta["k"] (object key): contains NUL`},
		"bad UTF-8 key":             {delta(map[string]any{"user:\xff": 1}), `actions.stateDelta key "user:\xff": not valid UTF-8`},
		"bad UTF-8 value":           {delta(map[string]any{"k": "\xc3("}), `actions.stateDelta["k"]: not valid UTF-8`},
		"bad UTF-8 nested key":      {delta(map[string]any{"k": map[string]int{"\xff": 1}}), `actions.stateDelta["k"] (object key): not valid UTF-8`},
		"raw NUL value":             {delta(map[string]any{"k": json.RawMessage(`"\u0000"`)}), `actions.stateDelta["k"]: contains NUL`},
		"raw bad UTF-8 value":       {delta(map[string]any{"k": json.RawMessage("[\"\xff\"]")}), `actions.stateDelta["k"][0]: not valid UTF-8`},
		"huge number value":         {delta(map[string]any{"k": json.Number("1e400")}), `actions.stateDelta["k"]: number 1e400 is beyond a double's range`},
		"NUL author":                {&Event{Author: "a\x00"}, "event.author: contains NUL"},
		"bad UTF-8 author":          {&Event{Author: "\xff"}, "event.author: not valid UTF-8"},
		"NUL branch":                {&Event{Author: "a", Branch: "b\x00"}, "event.branch: contains NUL"},
		"NUL error message":         {&Event{Author: "a", ErrorMessage: "\x00"}, "event.errorMessage: contains NUL"},
		"bad UTF-8 error code":      {&Event{Author: "a", ErrorCode: "\xfe"}, "event.errorCode: not valid UTF-8"},
		"NUL long-running id":       {&Event{Author: "a", LongRunningToolIDs: []string{"ok", "\x00"}}, "event.longRunningToolIds[1]: contains NUL"},
		"NUL transfer":              {&Event{Author: "a", Actions: EventActions{TransferToAgent: "\x00"}}, "event.actions.transferToAgent: contains NUL"},
		"NUL rewind":                {&Event{Author: "a", Actions: EventActions{RewindBeforeInvocationID: "i\x00"}}, "event.actions.rewindBeforeInvocationId: contains NUL"},
		"NUL artifact":              {&Event{Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"f\x00": 1}}}, "event.actions.artifactDelta (object key): contains NUL"},
		"artifact version 2^53":     {&Event{Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"f": 1 << 53}}}, `event.actions.artifactDelta.f: version 9007199254740992, must be in [-1, 2^53)`},
		"artifact version max":      {&Event{Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"a b": math.MaxInt64}}}, `event.actions.artifactDelta["a b"]: version 9223372036854775807`},
		"artifact version -2":       {&Event{Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"user:f": -2}}}, `event.actions.artifactDelta["user:f"]: version -2`},
		"bad inline data":           {content(`{"parts":[{"inlineData":{"mimeType":"image/png","data":"!!!notbase64"}}]}`), "event.content.parts[0].inlineData.data: not base64: '!' at offset 0"},
		"bad thought signature":     {content(`{"parts":[{"text":"x","thoughtSignature":"%%%"}]}`), "event.content.parts[0].thoughtSignature: not base64"},
		"mixed alphabets":           {content(`{"parts":[{"inlineData":{"data":"A-_/"}}]}`), "event.content.parts[0].inlineData.data: not base64: it mixes"},
		"bits after the last byte":  {content(`{"parts":[{"inlineData":{"data":"AB"}}]}`), "event.content.parts[0].inlineData.data: not base64: its last character"},
		"bytes not a string":        {content(`{"parts":[{"thoughtSignature":[1,2]}]}`), "event.content.parts[0].thoughtSignature: a bytes field is a string of base64"},
		"part not an object":        {content(`{"parts":[{"functionCall":{"id":"a","name":"f"}},"x"]}`), "event.content.parts[1]: not an object"},
		"parts not a list":          {content(`{"parts":{"text":"x"}}`), "event.content.parts: not a list"},
		"content not an object":     {content(`"hello"`), "event.content: not an object"},
		"bad response part data":    {content(`{"parts":[{"functionResponse":{"name":"f","parts":[{"inlineData":{"data":"a b"}}]}}]}`), "event.content.parts[0].functionResponse.parts[0].inlineData.data: not base64"},
		"bad compacted bytes":       {&Event{Author: "a", Actions: EventActions{Compaction: json.RawMessage(`{"compactedContent":{"parts":[{"inlineData":{"data":"*"}}]}}`)}}, "event.actions.compaction.compactedContent.parts[0].inlineData.data: not base64"},
		"bad sdk blob":              {&Event{Author: "a", Extra: map[string]json.RawMessage{"groundingMetadata": json.RawMessage(`{"searchEntryPoint":{"sdkBlob":"A"}}`)}}, "event.groundingMetadata.searchEntryPoint.sdkBlob: not base64: 1 characters"},
		"bad UTF-8 artifact":        {&Event{Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"\xff": 1}}}, "event.actions.artifactDelta (object key): not valid UTF-8"},
		"NUL content text":          {content(`{"parts":[{"text":"a\u0000"}]}`), "event.content.parts[0].text: contains NUL"},
		"raw NUL content":           {content("{\"parts\":[{\"text\":\"a\x00\"}]}"), "event.content: invalid character '\\x00' in string literal"},
		"bad UTF-8 content":         {content("{\"role\":\"model\",\"parts\":[{\"text\":\"caf\xe9\"}]}"), "event.content.parts[0].text: not valid UTF-8"},
		"surrogate content":         {content(`{"parts":[{"text":"\ud83d"}]}`), "event.content.parts[0].text: unpaired UTF-16 surrogate escape"},
		"NUL function args":         {content(`{"parts":[{"functionCall":{"name":"f","args":{"q":["\u0000"]}}}]}`), "event.content.parts[0].functionCall.args.q[0]: contains NUL"},
		"bad UTF-8 args key":        {content("{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"\xff\":1}}}]}"), "event.content.parts[0].functionCall.args (object key): not valid UTF-8"},
		"huge number content":       {content(`{"parts":[{"functionResponse":{"response":{"n":-9e999}}}]}`), "event.content.parts[0].functionResponse.response.n: number -9e999 is beyond a double's range"},
		"NUL custom metadata":       {&Event{Author: "a", CustomMetadata: map[string]any{"m": []any{"\x00"}}}, "event.customMetadata.m[0]: contains NUL"},
		"bad UTF-8 metadata":        {&Event{Author: "a", CustomMetadata: map[string]any{"m": "\xff"}}, "event.customMetadata.m: not valid UTF-8"},
		"huge number metadata":      {&Event{Author: "a", CustomMetadata: map[string]any{"m": json.Number("1e309")}}, "event.customMetadata.m: number 1e309"},
		"NUL extra":                 {&Event{Author: "a", Extra: map[string]json.RawMessage{"usageMetadata": json.RawMessage(`{"x":"\u0000"}`)}}, "event.usageMetadata.x: contains NUL"},
		"bad UTF-8 extra":           {&Event{Author: "a", Extra: map[string]json.RawMessage{"future": json.RawMessage("\"\xff\"")}}, "event.future: not valid UTF-8"},
		"bad UTF-8 extra key":       {&Event{Author: "a", Extra: map[string]json.RawMessage{"f\xff": json.RawMessage(`1`)}}, "event (object key): not valid UTF-8"},
		"NUL actions extra":         {&Event{Author: "a", Actions: EventActions{Extra: map[string]json.RawMessage{"route": json.RawMessage(`["\u0000"]`)}}}, "event.actions.route[0]: contains NUL"},
		"NUL agent state":           {&Event{Author: "a", Actions: EventActions{AgentState: json.RawMessage(`{"s":"\u0000"}`)}}, "event.actions.agentState.s: contains NUL"},
		"surrogate compaction":      {&Event{Author: "a", Actions: EventActions{Compaction: json.RawMessage(`"\udfff"`)}}, "event.actions.compaction: unpaired"},
		"NUL auth config":           {&Event{Author: "a", Actions: EventActions{RequestedAuthConfigs: map[string]json.RawMessage{"fc": json.RawMessage(`{"a":"\u0000"}`)}}}, "event.actions.requestedAuthConfigs.fc.a: contains NUL"},
		"content too deep":          {content(`{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`), "event.content: nested deeper than 10000 levels"},
		"content key not camelCase": {content(`{"parts":[{"text":"x","my_key":1}]}`), "event.content.parts[0].my_key: a key the database would give back as another"},
		"content key capitalized":   {content(`{"role":"model","Parts":[]}`), "event.content.Parts: a key the database would give back as another"},
		"snake_case extra":          {&Event{Author: "a", Extra: map[string]json.RawMessage{"my_field": json.RawMessage(`1`)}}, "event.my_field: a key the database would give back as another"},
		"bad UTF-8 confirmation":    {&Event{Author: "a", Actions: EventActions{RequestedToolConfirmations: map[string]json.RawMessage{"fc": json.RawMessage("\"\xff\"")}}}, "event.actions.requestedToolConfirmations.fc: not valid UTF-8"},
	}
}

func TestValidateEventRefuses(t *testing.T) {
	t.Parallel()
	s := testService(t, nil)
	for name, c := range badEvents() {
		before, err := json.Marshal(c.ev)
		if err != nil {
			before = nil // not marshalable as it is (bad UTF-8 keys are)
		}
		err = s.ValidateEvent(c.ev)
		require.ErrorIs(t, err, ErrInvalidArgument, name)
		require.Contains(t, err.Error(), c.want, name)
		if before != nil {
			after, _ := json.Marshal(c.ev)
			require.Equal(t, string(before), string(after), "%s: the event is left as it was", name)
		}
	}
}

func TestValidateEventAccepts(t *testing.T) {
	t.Parallel()
	s := testService(t, nil)
	for name, ev := range map[string]*Event{
		"zero":           {},
		"1970":           {Timestamp: time.Unix(0, 0)},
		"last µs":        {Timestamp: time.UnixMicro(MaxTimestampMicros - 1)},
		"unicode":        {Author: "é€😀\ufffd", Content: json.RawMessage(`{"parts":[{"text":"é\u00e9\ud83d\ude00\ufffd\u0001"}]}`)},
		"escaped U+FFFD": {Author: "a", Extra: map[string]json.RawMessage{"x": json.RawMessage(`"\ufffd"`)}, Actions: EventActions{AgentState: json.RawMessage(`["\uFFFD"]`)}},
		"big numbers":    {Author: "a", CustomMetadata: map[string]any{"n": json.Number("1.7976931348623157e308"), "t": json.Number("1e-400")}},
		"NUL as text":    {Author: `\u0000`, Content: json.RawMessage(`{"t":"\\u0000"}`), Actions: EventActions{StateDelta: map[string]any{"k": `\u0000`}}},
		"partial":        {Partial: true, Author: "\x00"},
		"snake_case app data": {Author: "a", Content: json.RawMessage(`{"parts":[{"functionCall":{"name":"f","args":{"city_name":{"Zip_Code":1}}}},` +
			`{"functionResponse":{"name":"f","response":{"my_result":[{"A_b":1}]}}}]}`),
			CustomMetadata: map[string]any{"my_key": map[string]any{"X_y": 1}}, Actions: EventActions{StateDelta: map[string]any{"user:my_key": map[string]any{"Q_r": 1}},
				ArtifactDelta: map[string]int64{"my_file.txt": 1}}},
		"base64 forms": {Author: "a", Content: json.RawMessage(`{"parts":[{"inlineData":{"data":"-_-_AA"},"thoughtSignature":"AQI"},` +
			`{"inlineData":{"data":"+/+/AA=="}},{"inlineData":{"data":"AA="}},{"inlineData":{"data":null}},{"inlineData":{"data":""}}]}`),
			Extra: map[string]json.RawMessage{"groundingMetadata": json.RawMessage(`{"searchEntryPoint":{"sdkBlob":"_w"}}`)}},
		"artifact versions":       {Author: "a", Actions: EventActions{ArtifactDelta: map[string]int64{"gone": -1, "zero": 0, "last": 1<<53 - 1}}},
		"snake_case action extra": {Author: "a", Actions: EventActions{Extra: map[string]json.RawMessage{"x": json.RawMessage(`{"a_b":1}`), "set_it": json.RawMessage(`1`)}}},
		"OAuth scopes": {Author: "a", Actions: EventActions{RequestedAuthConfigs: map[string]json.RawMessage{"fc-1": json.RawMessage(
			`{"authScheme":{"type":"oauth2","flows":{"authorizationCode":{"tokenUrl":"t","scopes":{"read_api":"Read","write_repository":"Write"}}}}}`)}}},
		"keys like known ones": {Author: "a", Extra: map[string]json.RawMessage{"Author": json.RawMessage(`"b"`), "Id": json.RawMessage(`{}`)},
			Actions: EventActions{Extra: map[string]json.RawMessage{"StateDelta": json.RawMessage(`1`)}}},
	} {
		require.NoError(t, s.ValidateEvent(ev), name)
	}
}

func TestValidateEventLimits(t *testing.T) {
	t.Parallel()
	s := testService(t, nil)
	require.Equal(t, 1000, s.cfg.MaxDeltaKeys)
	require.Equal(t, 2<<20, s.cfg.MaxWriteBytes)
	require.Equal(t, [3]int{2 << 20, 2 << 20, 4 << 20}, [3]int{s.cfg.MaxAppStateBytes, s.cfg.MaxUserStateBytes, s.cfg.MaxSessionStateBytes})

	keys := func(n int, prefix string) map[string]any {
		d := map[string]any{}
		for i := range n {
			d[fmt.Sprintf("%sk%d", prefix, i)] = i
		}
		require.Len(t, d, n)
		return d
	}
	require.NoError(t, s.ValidateEvent(&Event{Actions: EventActions{StateDelta: keys(1000, "")}}))
	for _, prefix := range []string{"", "temp:", "user:", "app:"} {
		err := s.ValidateEvent(&Event{Actions: EventActions{StateDelta: keys(1001, prefix)}})
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Contains(t, err.Error(), "actions.stateDelta: 1001 keys, limit 1000 (Config.MaxDeltaKeys)")
	}

	// 8 temp: values of 900 KiB: each is allowed, together they are not.
	big := strings.Repeat("x", 900<<10)
	temp := map[string]any{}
	for i := range 8 {
		temp["temp:"+string(rune('a'+i))] = big
	}
	err := s.ValidateEvent(&Event{Actions: EventActions{StateDelta: temp}})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "limit 2097152 (Config.MaxWriteBytes)")
	// Two of them and a 300 KiB event: the event JSON counts with the temp: values.
	err = s.ValidateEvent(&Event{Content: json.RawMessage(`"` + strings.Repeat("y", 300<<10) + `"`),
		Actions: EventActions{StateDelta: map[string]any{"temp:a": big, "temp:b": big}}})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Regexp(t, `event: \d+ bytes of JSON and temp: state, limit 2097152 \(Config.MaxWriteBytes\)`, err.Error())
	require.NoError(t, s.ValidateEvent(&Event{Actions: EventActions{StateDelta: map[string]any{"temp:a": big, "temp:b": big}}}))

	// Each value and the event keep their own limits.
	err = s.ValidateEvent(&Event{Actions: EventActions{StateDelta: map[string]any{"temp:a": strings.Repeat("x", 1<<20)}}})
	require.ErrorContains(t, err, `actions.stateDelta["temp:a"]: value is 1048578 bytes, limit 1048576 (Config.MaxStateValueBytes)`)
	err = s.ValidateEvent(&Event{Content: json.RawMessage(`"` + strings.Repeat("y", 1<<20) + `"`)})
	require.ErrorContains(t, err, "limit 1048576 (Config.MaxEventBytes)")
}

func TestParseEpochRange(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"1e20", "-1e20", "9.3e15", `"Inf"`, `"-Inf"`, `"+inf"`, "1e400", `"NaN"`, `"1e99999999"`} {
		_, err := parseEpoch(json.RawMessage(in))
		require.Error(t, err, in)
	}
	// Numbers that fit are read (AppendEvent judges the range).
	got, err := parseEpoch(json.RawMessage("-5"))
	require.NoError(t, err)
	require.Equal(t, time.Unix(-5, 0).UTC(), got)
	var ev Event
	require.ErrorContains(t, json.Unmarshal([]byte(`{"id":"e","timestamp":1e20}`), &ev), "out of range")
	require.NoError(t, json.Unmarshal([]byte(`{"id":"e","timestamp":253402214400000}`), &ev)) // 9999 in ms
	require.ErrorContains(t, testService(t, nil).ValidateEvent(&ev), "event.Timestamp: 9999-12-31T00:00:00Z is outside")
}

func TestWindowBound(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	require.Equal(t, at.UnixMicro(), windowBound(at))
	require.Equal(t, int64(0), windowBound(time.Unix(-1, 0)))
	require.Equal(t, int64(0), windowBound(time.Date(-50000, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, int64(1<<53), windowBound(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Equal(t, int64(1<<53), windowBound(time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)))
}

// BenchmarkValidateEvent: the checks of a typical event (2 KB of content, a
// function call, five state keys), against encoding it alone.
func BenchmarkValidateEvent(b *testing.B) {
	s := testService(b, nil)
	ev := benchEvent()
	b.Run("encode only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.ValidateEvent(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkValidateEventParts: the parts of the checks on the event of
// BenchmarkValidateEvent.
func BenchmarkValidateEventParts(b *testing.B) {
	s := testService(b, nil)
	p, err := s.prepareEvent(benchEvent())
	require.NoError(b, err)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			var sc jsonScan
			sc.check(p.blob, true)
		}
	})
	b.Run("keys", func(b *testing.B) {
		for b.Loop() {
			eventjson.CheckAPI(p.blob)
		}
	})
	b.Run("delta", func(b *testing.B) {
		for b.Loop() {
			s.splitDelta("d", benchEvent().Actions.StateDelta)
		}
	})
}

// benchEvent is a typical event: 2 KB of content, a function call, five state keys.
func benchEvent() *Event {
	return &Event{ID: "e", InvocationID: "i", Author: "model",
		Content: json.RawMessage(`{"role":"model","parts":[{"text":"` + strings.Repeat("Lorem ipsum dolor sit amet, élit. ", 60) +
			`"},{"functionCall":{"id":"fc-1","name":"get_weather","args":{"city_name":"Paris","days":3}}}]}`),
		Actions: EventActions{StateDelta: map[string]any{"k": 1, "user:name": "Ann", "app:v": []any{1.5, "x"}, "temp:t": true,
			"nested": map[string]any{"a": []any{"b", map[string]any{"c": nil}}}}}}
}

// An event nested as deep as encoding/json reads is accepted and reads
// back; one level more is refused, wherever the depth comes from.
func TestValidateEventNesting(t *testing.T) {
	t.Parallel()
	s := testService(t, nil)
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// event { content { x: ... }}: two levels above the array.
	p, err := s.prepareEvent(&Event{Author: "a", Content: json.RawMessage(`{"x":` + nested(9998) + `}`)})
	require.NoError(t, err)
	var back Event
	require.NoError(t, json.Unmarshal(p.blob, &back))
	for name, ev := range map[string]*Event{
		"content":  {Author: "a", Content: json.RawMessage(`{"x":` + nested(9999) + `}`)},
		"extra":    {Author: "a", Extra: map[string]json.RawMessage{"x": json.RawMessage(nested(10000))}},
		"metadata": {Author: "a", CustomMetadata: map[string]any{"m": json.RawMessage(nested(9999))}},
	} {
		require.ErrorIs(t, s.ValidateEvent(ev), ErrInvalidArgument, name)
	}
}

// TestValidateEvents: the events of a create, each as ValidateEvent, and
// one id for two different events refused; the same event twice is fine.
func TestValidateEvents(t *testing.T) {
	t.Parallel()
	s := testService(t, nil)
	ev := func(id, author string, ts int64) *Event {
		return &Event{ID: id, Author: author, Timestamp: time.Unix(ts, 0), Content: json.RawMessage(`{"parts":[{"text":"x"}]}`)}
	}
	require.NoError(t, s.ValidateEvents(nil))
	require.NoError(t, s.ValidateEvents([]*Event{ev("a", "x", 1), ev("a", "x", 2), ev("", "x", 3), ev("", "y", 4), {Partial: true, ID: "a"}}))
	for name, c := range map[string]struct {
		evs  []*Event
		want string
	}{
		"other author":  {[]*Event{ev("a", "x", 1), ev("b", "x", 1), ev("a", "y", 1)}, `events[2]: id "a" is also events[0]'s, a different event`},
		"other content": {[]*Event{ev("a", "x", 1), {ID: "a", Author: "x", Timestamp: time.Unix(1, 0)}}, `events[1]: id "a" is also events[0]'s`},
		"nil":           {[]*Event{ev("a", "x", 1), nil}, "events[1]: adksession: invalid argument: event: nil"},
		"bad event":     {[]*Event{{Author: "\x00"}}, "events[0]: adksession: invalid argument: event.author: contains NUL"},
	} {
		err := s.ValidateEvents(c.evs)
		require.ErrorIs(t, err, ErrInvalidArgument, name)
		require.Contains(t, err.Error(), c.want, name)
	}
}
