package eventjson

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWithColumns(t *testing.T) {
	ts := time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{
			name: "replaces in place and keeps other bytes",
			in:   `{"author":"a <&>","timestamp":1.5,"x": [1,  2],"id":"old","invocation_id":"old"}`,
			want: `{"author":"a <&>","timestamp":1735787045678.901,"x":[1,  2],"id":"ev","invocation_id":"inv"}`,
		},
		{
			name: "appends missing members",
			in:   ` { "author" : "u" } `,
			want: `{"author":"u","id":"ev","invocation_id":"inv","timestamp":1735787045678.901}`,
		},
		{
			name: "empty object",
			in:   `{}`,
			want: `{"id":"ev","invocation_id":"inv","timestamp":1735787045678.901}`,
		},
		{
			name: "keys keep their bytes; escaped names are recognized",
			in:   `{"a\u0062":"\"}{[","\u0069d":1,"n":-1.5e3,"t":true,"z":null,"arr":[{"id":[]},"]"]}`,
			want: `{"a\u0062":"\"}{[","\u0069d":"ev","n":-1.5e3,"t":true,"z":null,"arr":[{"id":[]},"]"],"invocation_id":"inv","timestamp":1735787045678.901}`,
		},
		{
			name: "nested members of the same name are kept",
			in:   `{"content":{"id":"c","timestamp":2}}`,
			want: `{"content":{"id":"c","timestamp":2},"id":"ev","invocation_id":"inv","timestamp":1735787045678.901}`,
		},
		{name: "array", in: `[1]`, wantErr: true},
		{name: "string", in: `"{}"`, wantErr: true},
		{name: "null", in: `null`, wantErr: true},
		{name: "empty", in: ``, wantErr: true},
		{name: "truncated", in: `{"a":1`, wantErr: true},
		{name: "bad value", in: `{"a":tru}`, wantErr: true},
		{name: "trailing data", in: `{"a":1} {}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WithColumns([]byte(tc.in), "ev", "inv", ts)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %s, want an error", got)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got), "event data")
		})
	}
}

func TestEpochMillis(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.UnixMicro(1_700_000_000_123_456), "1700000000123.456"},
		{time.UnixMicro(1_700_000_000_123_450), "1700000000123.45"},
		{time.UnixMicro(1_700_000_000_123_400), "1700000000123.4"},
		{time.UnixMicro(1_700_000_000_123_000), "1700000000123"},
		{time.UnixMicro(1_700_000_000_000_001), "1700000000000.001"},
		{time.Unix(0, 0), "0"},
		{time.UnixMicro(-1_500), "-1.5"},
		{time.Unix(1, 999), "1000"}, // nanoseconds are dropped
	} {
		require.Equal(t, tc.want, string(epochMillis(tc.t)), tc.t.String())
	}
}

func BenchmarkWithColumns(b *testing.B) {
	data := []byte(`{"author":"model","content":{"role":"model","parts":[{"text":"reply 7 <b>&</b> é"},` +
		`{"function_call":{"name":"f","args":{"camelKey":1}}}]},"invocation_id":"stale","id":"stale",` +
		`"actions":{"state_delta":{"app:a":7,"user:u":"x","k":null},"artifact_delta":{},` +
		`"requested_auth_configs":{},"requested_tool_confirmations":{}},"timestamp":1.5,"custom_metadata":{"x y":[1, 2]}}`)
	ts := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := WithColumns(data, "e1", "inv", ts); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStringEnd: stringEnd finds the end of every JSON string, escaped
// quotes and runs of backslashes before a quote at every place among them,
// as a byte-by-byte scan does.
func TestStringEnd(t *testing.T) {
	byByte := func(data []byte, i int) int {
		for i++; data[i] != '"'; i++ {
			if data[i] == '\\' {
				i++
			}
		}
		return i + 1
	}
	r := rand.New(rand.NewPCG(3, 4))
	parts := []string{`"`, `\`, `\\`, `\"`, "a", "é", "☃", "\n", "xyz"}
	for range 20000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		js, err := json.Marshal(b.String())
		require.NoError(t, err)
		data := append(append([]byte(`{"k":`), js...), `,"next":"x"}`...)
		require.Equal(t, byByte(data, 5), stringEnd(data, 5), "%s", data)
		require.Equal(t, 5+len(js), stringEnd(data, 5), "%s", data)
	}
}
