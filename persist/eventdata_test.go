package persist

import (
	"encoding/json"
	"testing"
	"time"
)

func TestStorageEventData(t *testing.T) {
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
			got, err := storageEventData([]byte(tc.in), "ev", "inv", ts)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %s, want an error", got)
				}
				return
			}
			must(t, err)
			same(t, "event data", string(got), tc.want)
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
		same(t, tc.t.String(), string(epochMillis(tc.t)), tc.want)
	}
}

func TestDBTime(t *testing.T) {
	want := time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC)
	for _, v := range []any{
		"2025-01-02 03:04:05.678901",
		[]byte("2025-01-02T03:04:05.678901"),
		"2025-01-02 05:04:05.678901+02:00",
		"2025-01-02T03:04:05.678901Z",
		want.In(time.FixedZone("x", 3600)),
		float64(want.UnixMicro()) / 1e6,
	} {
		var d dbTime
		must(t, d.Scan(v))
		if !d.t.Equal(want) || d.t.Location() != time.UTC {
			t.Errorf("Scan(%#v) = %v, want %v", v, d.t, want)
		}
	}
	var d dbTime
	if err := d.Scan("yesterday"); err == nil {
		t.Error("Scan(yesterday) succeeded")
	}
	must(t, d.Scan(int64(1735787045)))
	same(t, "epoch seconds", d.t, time.Unix(1735787045, 0).UTC())
}

func TestCeilMicro(t *testing.T) {
	base := time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC)
	same(t, "whole", ceilMicro(base), base)
	same(t, "fraction", ceilMicro(base.Add(1)), base.Add(time.Microsecond))
}

func TestEncodeState(t *testing.T) {
	got, err := encodeState(nil)
	must(t, err)
	same(t, "nil state", got, "{}")
	got, err = encodeState(map[string]json.RawMessage{"b": []byte(`null`), "a": []byte(` "<x>" `)})
	must(t, err)
	same(t, "state", got, `{"a":"<x>","b":null}`)
	if _, err := encodeState(map[string]json.RawMessage{"a": []byte(`{`)}); err == nil {
		t.Error("invalid JSON value encoded")
	}
}

func BenchmarkStorageEventData(b *testing.B) {
	data := storageJSON(7)
	ts := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := storageEventData(data, "e1", "inv", ts); err != nil {
			b.Fatal(err)
		}
	}
}
