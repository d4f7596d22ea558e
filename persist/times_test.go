package persist

import (
	"encoding/json"
	"math"
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

// TestDBTimeClamped: a time outside [1970, 2200) reads as the nearest end
// of the range, whatever form the driver gives it in (ADK Python takes
// timestamp=1e10, year 2286; no script holds those microseconds exactly).
func TestDBTimeClamped(t *testing.T) {
	first, last := time.UnixMicro(MinTimestampMicros).UTC(), time.UnixMicro(MaxTimestampMicros-1).UTC()
	inRange := time.Date(2199, 12, 31, 23, 59, 59, 999998000, time.UTC)
	for _, c := range []struct {
		v    any
		want time.Time
	}{
		{time.Unix(1e10, 0), last},
		{time.Date(294276, 1, 1, 0, 0, 0, 0, time.UTC), last},
		{"2286-11-20 17:46:40.000000", last},
		{[]byte("2200-01-01 00:00:00.000000"), last},
		{"2200-01-01T02:00:00+02:00", last},
		{float64(1e10), last},
		{1e300, last},
		{int64(1e10), last},
		{int64(math.MaxInt64), last},
		{time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), first},
		{"0001-01-01 00:00:00", first},
		{float64(-1.5), first},
		{-1e300, first},
		{int64(math.MinInt64), first},
		{inRange, inRange},
		{"2199-12-31 23:59:59.999999", last},
		{float64(0), first},
	} {
		var d dbTime
		must(t, d.Scan(c.v))
		if !d.t.Equal(c.want) || d.t.Location() != time.UTC {
			t.Errorf("Scan(%#v) = %v, want %v", c.v, d.t, c.want)
		}
	}
	var d dbTime
	if err := d.Scan(math.NaN()); err == nil {
		t.Errorf("Scan(NaN) = %v, want an error", d.t)
	}
}
