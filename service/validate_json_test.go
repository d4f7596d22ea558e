package service

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScanJSON(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		`{}`, `[]`, `""`, `null`, `true`, `-0.5e-3`, ` {"a" : [1, 2.5, "x", {"b": null}] } `,
		`"é€😀"`, "\"\u2028\"", `"\u00e9\u20ac\ud83d\ude00"`, `"\\u0000"`, `"\\\\u0000"`, `"\"\\"`,
		`"\u0001\u001f\t\n"`, `1.7976931348623157e308`, `-1.7976931348623157e308`, `1e-400`,
		`"` + strings.Repeat("9", 400) + `"`, "\"\xef\xbf\xbd\"", // a real U+FFFD
		`[` + strings.Repeat(`"x",`, 1000) + `1]`,
	} {
		var sc jsonScan
		require.True(t, sc.check([]byte(ok), false), "%s: %s", ok, sc.reason)
	}
	for _, c := range []struct{ in, path, reason string }{
		{`"a\u0000b"`, `f`, "contains NUL"},
		{`"a\u0000b"`, `f`, "contains NUL"},
		{"\"a\x00b\"", `f`, "contains NUL"},
		{`{"k":[1,{"name":"\u0000"}]}`, `f.k[1].name`, "contains NUL"},
		{`{"a b":{"x.y":[[0,"\u0000"]]}}`, `f["a b"]["x.y"][0][1]`, "contains NUL"},
		{`{"k":{"a\u0000":1}}`, `f.k (object key)`, "contains NUL"},
		{"[\"ok\",\"\xff\"]", `f[1]`, "not valid UTF-8"},
		{"{\"\xc3\":1}", `f (object key)`, "not valid UTF-8"},
		{"\"\xed\xa0\x80\"", `f`, "not valid UTF-8"}, // a surrogate in UTF-8
		{`"\ufffd"`, `f`, "not valid UTF-8"},
		{`{"x":"a\uFFFDb"}`, `f.x`, "not valid UTF-8"},
		{`"\ud800"`, `f`, "unpaired UTF-16 surrogate escape"},
		{`"\ud800x"`, `f`, "unpaired UTF-16 surrogate escape"},
		{`"\ud800\u0041"`, `f`, "unpaired UTF-16 surrogate escape"},
		{`"\udc00"`, `f`, "unpaired UTF-16 surrogate escape"},
		{`["\ude00\ud83d"]`, `f[0]`, "unpaired UTF-16 surrogate escape"},
		{`{"n":1e400}`, `f.n`, "beyond a double's range"},
		{`[-1E+309]`, `f[0]`, "beyond a double's range"},
		{`[` + strings.Repeat("9", 310) + `]`, `f[0]`, "beyond a double's range"},
		{`{"a":1`, `f.a`, "not valid JSON"},
		{`"abc`, `f`, "not valid JSON"},
		{`]`, `f`, "not valid JSON"},
		{`{]`, `f`, "not valid JSON"},
		{`1 2`, `f`, "not valid JSON"},
		{`"\u12"`, `f`, "not valid JSON"},
		{"\"a\nb\"", `f`, "raw control character"},
	} {
		p := &jsonScan{}
		require.False(t, p.check([]byte(c.in), false), "%s", c.in)
		err := p.err("f")
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.Equal(t, ErrInvalidArgument.Error()+": "+c.path+": "+p.reason, err.Error(), "%s", c.in)
		require.Contains(t, p.reason, c.reason, "%s", c.in)
	}
}

func TestScanJSONRaw(t *testing.T) {
	t.Parallel()
	// An escaped U+FFFD is a character in raw JSON, invalid UTF-8 encoded by
	// encoding/json elsewhere; NUL is refused everywhere.
	ev := `{"id":"e","content":{"parts":[{"text":"\ufffd"}]},"actions":{"stateDelta":{},` +
		`"requestedAuthConfigs":{"fc-1":{"k":"\ufffd"}},"agentState":"\ufffd","future":["\ufffd"]},"extra":{"\ufffd":"\ufffd"}}`
	var sc jsonScan
	require.True(t, sc.check([]byte(ev), true), sc.reason)
	for in, path := range map[string]string{
		`{"author":"\ufffd"}`:                                "event.author",
		`{"customMetadata":{"k":["\ufffd"]}}`:                "event.customMetadata.k[0]",
		`{"actions":{"stateDelta":{"k":"\ufffd"}}}`:          "event.actions.stateDelta.k",
		`{"actions":{"requestedAuthConfigs":{"\ufffd":{}}}}`: "event.actions.requestedAuthConfigs (object key)",
		`{"\ufffd":1}`: "event (object key)",
		`{"content":{"parts":[{"text":"\u0000"}]}}`:                 "event.content.parts[0].text",
		`{"actions":{"requestedToolConfirmations":{"x":"\u0000"}}}`: `event.actions.requestedToolConfirmations.x`,
	} {
		p := &jsonScan{}
		require.False(t, p.check([]byte(in), true), in)
		require.Contains(t, p.err("event").Error(), ": "+path+": ", in)
	}
}

// encoding/json writes the invalid UTF-8 of Go strings as the escape
// "\ufffd" and a real U+FFFD as itself: scanJSON relies on it.
func TestEncodingJSONEscapesInvalidUTF8(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(map[string]any{"a\xffb": []string{"x\xc3", "\ufffd"}})
	require.NoError(t, err)
	require.Equal(t, `{"a\ufffdb":["x\ufffd","`+"\ufffd"+`"]}`, string(b))
}

func BenchmarkScanJSON(b *testing.B) {
	ev := Event{ID: "e", Author: "model", Content: json.RawMessage(`{"role":"model","parts":[{"text":"` +
		strings.Repeat(`Lorem ipsum dolor sit amet, \"consectetur\" adipiscing élit.\n`, 200) + `"}]}`),
		Actions: EventActions{StateDelta: map[string]any{"k": map[string]any{"a": []any{1.5, "x", true}}}}}
	blob, err := json.Marshal(ev)
	require.NoError(b, err)
	b.SetBytes(int64(len(blob)))
	b.ReportAllocs()
	for b.Loop() {
		var sc jsonScan
		if !sc.check(blob, true) {
			b.Fatal("refused")
		}
	}
}
