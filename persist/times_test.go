package persist

import (
	"encoding/json"
	"testing"
	"time"
)

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
