package service

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/eventjson"
)

// decodeEvent reads what encoding/json reads: the same Event, and an error
// for the same inputs.

// decodeSeeds are events of every member and type, and the edge cases of
// encoding/json a hand-written decoder gets wrong first.
var decodeSeeds = []string{
	`{"id":"e1","invocationId":"i1","author":"a","timestamp":1.5,"content":{"role":"model","parts":[{"text":"h\u00e9 <b> & \u2028"}]}}`,
	`{"id":"e2","author":"a","timestamp":1735787045.123456,"actions":{"stateDelta":{"user:k":[1,null,1e-7,1e21,-0],"x":{"b":1,"a":"\ud83d\ude00"}},"artifactDelta":{"f.txt":2}},"customMetadata":{"m":{"x":1}}}`,
	`{"id":"e4","author":"a","usageMetadata":{"totalTokenCount":3},"actions":{"requestedToolConfirmations":{"fc":{"hint":"h"}},"requestedAuthConfigs":{"a":null},"futureAction":true,"agentState":{"s" : 1},"compaction":[1]}}`,
	`{"id":"e5","invocation_id":"i","author":"a","timestamp":1735787045123.456,"actions":{"state_delta":{"k":1}}}`,
	`{"id":"e6","author":"a","branch":"b.c","errorCode":"E","errorMessage":"m\n","interrupted":true,"turnComplete":true,"partial":true,"longRunningToolIds":["a","<",null]}`,
	`null`, ` {} `, `[]`, `{"id":5}`, `{"id":5,"id":"x"}`, `{"id":"x","id":5}`, `{"actions":null}`, `{"actions":"x"}`,
	`{"actions":{"stateDelta":{"k":1e400}}}`, `{"actions":{"artifactDelta":{"f":1.5}}}`, `{"actions":{"artifactDelta":{"f":null,"g":-0}}}`,
	`{"actions":{"artifactDelta":{"f":9223372036854775808}}}`, `{"actions":{"escalate":null,"endOfAgent":"true"}}`,
	`{"content":null,"agentState":null}`, `{"content":01}`, `{"content":[1,]}`, `{"content":"\x"}`, "{\"id\":\"\xff\"}",
	`{"id":"\ud800"}`, `{"timestamp":"2025-01-02T03:04:05.123456789Z"}`, `{"timestamp":{}}`, `{"timestamp":null}`,
	`{"longRunningToolIds":{}}`, `{"longRunningToolIds":[1]}`, `{"customMetadata":[]}`, `{"a":1} x`, `{"a":1`, `{"a" 1}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":.5}`, `{"k\u0041":1}`, `{"actions":{"stateDelta":null}}`,
	`{"actions":{"stateDelta":{"a":1},"stateDelta":{"b":2}}}`, `{"content":1,"content":null}`, "{\"a\":\"\t\"}",
}

func TestDecodeEventMatchesJSON(t *testing.T) {
	t.Parallel()
	for _, in := range decodeSeeds {
		checkDecode(t, []byte(in))
	}
	deep := strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth)
	checkDecode(t, []byte(`{"content":`+deep+`}`))
	checkDecode(t, []byte(`{"content":`+strings.Repeat("[", maxJSONDepth-1)+strings.Repeat("]", maxJSONDepth-1)+`}`))
	checkDecode(t, []byte(`{"content":`+strings.Repeat("[", maxJSONDepth)+strings.Repeat("]", maxJSONDepth)+`}`))
	checkDecode(t, []byte(`{"actions":{"stateDelta":{"k":`+strings.Repeat("[", maxJSONDepth-3)+strings.Repeat("]", maxJSONDepth-3)+`}}}`))
	checkDecode(t, []byte(`{"actions":{"stateDelta":{"k":`+strings.Repeat("[", maxJSONDepth-2)+strings.Repeat("]", maxJSONDepth-2)+`}}}`))
}

// checkDecode compares Event.UnmarshalJSON with referenceUnmarshal on in.
func checkDecode(t *testing.T, in []byte) {
	t.Helper()
	var got, want Event
	gotErr := got.UnmarshalJSON(in)
	wantErr := referenceUnmarshal(in, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%.200s: error %v, encoding/json %v", in, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%.200s:\ndecoded  %#v\nencoding/json %#v", in, got, want)
	}
}

func FuzzEventDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

// TestDecodeKeepsNoInput: the decoded event shares no bytes with the
// caller's buffer (json.Unmarshaler's contract).
func TestDecodeKeepsNoInput(t *testing.T) {
	t.Parallel()
	in := []byte(`{"id":"e","content":{"parts":[]},"x":[1],"actions":{"agentState":{"a":1}}}`)
	var ev Event
	require.NoError(t, ev.UnmarshalJSON(in))
	for i := range in {
		in[i] = ' '
	}
	require.JSONEq(t, `{"parts":[]}`, string(ev.Content))
	require.JSONEq(t, `[1]`, string(ev.Extra["x"]))
	require.JSONEq(t, `{"a":1}`, string(ev.Actions.AgentState))
	require.Equal(t, "e", ev.ID)
}

// referenceUnmarshal is Event.UnmarshalJSON by encoding/json: what
// decodeEvent must read alike (FuzzEventDecode).
func referenceUnmarshal(data []byte, e *Event) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	if eventjson.IsStorageForm(top) {
		api, err := eventjson.APIForm(data)
		if err != nil {
			return err
		}
		top = nil
		if err := json.Unmarshal(api, &top); err != nil {
			return err
		}
	}
	*e = Event{}
	for k, v := range top {
		var err error
		switch k {
		case "id":
			err = unmarshalString(v, &e.ID)
		case "invocationId":
			err = unmarshalString(v, &e.InvocationID)
		case "author":
			err = unmarshalString(v, &e.Author)
		case "branch":
			err = nullable(v, &e.Branch)
		case "timestamp":
			e.Timestamp, err = parseEpoch(v)
		case "partial":
			err = nullable(v, &e.Partial)
		case "turnComplete":
			err = nullable(v, &e.TurnComplete)
		case "content":
			if string(v) != "null" {
				e.Content = v
			}
		case "actions":
			if string(v) != "null" {
				err = referenceUnmarshalActions(v, &e.Actions)
			}
		case "longRunningToolIds":
			err = json.Unmarshal(v, &e.LongRunningToolIDs)
		case "errorCode":
			err = nullable(v, &e.ErrorCode)
		case "errorMessage":
			err = nullable(v, &e.ErrorMessage)
		case "interrupted":
			err = nullable(v, &e.Interrupted)
		case "customMetadata":
			err = json.Unmarshal(v, &e.CustomMetadata)
		default:
			if e.Extra == nil {
				e.Extra = map[string]json.RawMessage{}
			}
			e.Extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("event field %s: %w", k, err)
		}
	}
	return nil
}

// referenceUnmarshalActions is EventActions.UnmarshalJSON by encoding/json.
func referenceUnmarshalActions(data []byte, a *EventActions) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	*a = EventActions{}
	for k, v := range top {
		var err error
		switch k {
		case "stateDelta":
			err = json.Unmarshal(v, &a.StateDelta)
		case "artifactDelta":
			err = json.Unmarshal(v, &a.ArtifactDelta)
		case "transferToAgent":
			err = nullable(v, &a.TransferToAgent)
		case "escalate":
			err = nullable(v, &a.Escalate)
		case "skipSummarization":
			err = nullable(v, &a.SkipSummarization)
		case "endOfAgent":
			err = nullable(v, &a.EndOfAgent)
		case "rewindBeforeInvocationId":
			err = nullable(v, &a.RewindBeforeInvocationID)
		case "requestedAuthConfigs":
			err = json.Unmarshal(v, &a.RequestedAuthConfigs)
		case "requestedToolConfirmations":
			err = json.Unmarshal(v, &a.RequestedToolConfirmations)
		case "agentState":
			if string(v) != "null" {
				a.AgentState = v
			}
		case "compaction":
			if string(v) != "null" {
				a.Compaction = v
			}
		default:
			if a.Extra == nil {
				a.Extra = map[string]json.RawMessage{}
			}
			a.Extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("actions field %s: %w", k, err)
		}
	}
	return nil
}

// nullable decodes v into p, leaving the zero value for JSON null.
// unmarshalString is json.Unmarshal into a string, without its cost for a
// string of printable ASCII without escapes (ids, names): every event read
// decodes three.
func unmarshalString(v json.RawMessage, p *string) error {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' {
		plain := true
		for _, c := range v[1 : n-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			*p = string(v[1 : n-1])
			return nil
		}
	}
	return json.Unmarshal(v, p)
}

func nullable[T any](v json.RawMessage, p *T) error {
	if string(v) == "null" {
		return nil
	}
	return json.Unmarshal(v, p)
}

// BenchmarkDecodeEvent reads a typical cached event (a model's text reply
// of about 1 KiB with a state delta), with the decoder and with
// encoding/json, and json.Valid of it: what a raw fetch pays per event.
func BenchmarkDecodeEvent(b *testing.B) {
	ev := []byte(`{"id":"0b7c6a2e-1f1d-4c57-9a43-2b5f4c1d9e10","invocationId":"e-5f0e4f7e-9a43-2b5f","author":"model","timestamp":1735787045.123456,` +
		`"content":{"role":"model","parts":[{"text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 32) + `"}]},` +
		`"actions":{"stateDelta":{"turn":17,"user:lang":"en"},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},` +
		`"usageMetadata":{"candidatesTokenCount":212,"promptTokenCount":1890,"totalTokenCount":2102}}`)
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			var e Event
			if err := unmarshalEvent(bytes.Clone(ev), &e, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			var e Event
			if err := referenceUnmarshal(bytes.Clone(ev), &e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if !json.Valid(ev) {
				b.Fatal("invalid")
			}
		}
	})
}

// TestSpecialInString: the eight-byte test of scanString's fast path is
// true exactly when a byte of the word is a quote, a backslash, a control
// character or not ASCII: every byte value at every place among plain
// bytes, and random words.
func TestSpecialInString(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	word := func(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
	for at := range 8 {
		for c := range 256 {
			b := []byte("abcdefgh")
			b[at] = byte(c)
			require.Equal(t, special(byte(c)), specialInString(word(b)), "byte %#x at %d", c, at)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(2) == 0 {
				b[i] = byte(0x20 + r.IntN(0x60)) // mostly printable ASCII
			}
		}
		require.Equal(t, slices.ContainsFunc(b, special), specialInString(word(b)), "%q", b)
	}
}

// TestDecodeStringsEveryPlace: a string read eight bytes at a time reads
// what encoding/json reads with each kind of byte it must stop at (the
// quote, an escape, a control character, a byte not ASCII, invalid UTF-8)
// at every place of the first words, in a key and in a value.
func TestDecodeStringsEveryPlace(t *testing.T) {
	t.Parallel()
	for _, odd := range []string{`\"`, `\\`, `\n`, `\u00e9`, "\t", "\x01", "é", "☃", "\xff", "\xc3", `\x`, `\u12`} {
		for at := range 20 {
			text := strings.Repeat("a", at) + odd + strings.Repeat("b", 20-at)
			checkDecode(t, []byte(`{"author":"`+text+`","invocationId":"i"}`))
			checkDecode(t, []byte(`{"actions":{"stateDelta":{"`+text+`":"`+text+`"}}}`))
			checkDecode(t, []byte(`{"author":"`+strings.Repeat("a", at)+odd)) // unterminated
		}
	}
}
