package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/adksession/adksession/cache"
)

// FuzzSplitDelta: a delta as the HTTP API decodes it (a JSON object, numbers
// as json.Number), and one of Go strings: splitDelta never panics, refuses
// with ErrInvalidArgument only, and what it accepts round-trips: the pairs
// put back together are the delta, and every value is text both stores hold
// alike. The JSON scanner alone gets the raw bytes too.
func FuzzSplitDelta(f *testing.F) {
	f.Add([]byte(`{"k":1,"user:u":"x","app:a":[1,{"b":null}],"temp:t":true,"app:user:x":2}`), "k", "v")
	f.Add([]byte(`{"k":"\u0000"}`), "a\x00", "b")
	f.Add([]byte(`{"k":"\ud800"}`), "k", "\xff")
	f.Add([]byte(`{"k":1e400,"":1}`), "", "\ufffd")
	f.Add([]byte(`{"k":{"\ufffd":"é😀"}}`), "user:", "\u2028")
	s := testService(f, func(c *Config) { c.MaxStateValueBytes, c.MaxDeltaKeys, c.MaxWriteBytes = 256, 8, 1024 })
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		checkScan(t, data)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var fromJSON map[string]any
		if dec.Decode(&fromJSON) == nil {
			checkSplit(t, s, fromJSON)
		}
		checkSplit(t, s, map[string]any{key: value, "n": map[string]any{value: []any{key}}})
	})
}

// checkScan: jsonScan never panics, on any bytes; JSON it accepts is UTF-8,
// decodes into Go values (numbers into float64) and holds no NUL.
func checkScan(t *testing.T, data []byte) {
	var sc jsonScan
	if !sc.check(data, false) {
		if err := sc.err("f"); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("refused with %v", err)
		}
		return
	}
	if !json.Valid(data) {
		return // not JSON: the scanner does not judge what encoding/json would not write
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil || !utf8.Valid(data) || hasNUL(v) {
		t.Fatalf("accepted %q: %v", data, err)
	}
}

// checkSplit splits delta and checks what was accepted or refused.
func checkSplit(t *testing.T, s *Service, delta map[string]any) {
	t.Helper()
	d, normalized, err := s.splitDelta("f", delta)
	if err != nil {
		if !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), ErrInvalidArgument.Error()+": f") {
			t.Fatalf("refused with %v", err)
		}
		return
	}
	back := map[string]any{}
	put := func(prefix string, pairs []cache.Pair) {
		for _, p := range pairs {
			var v any
			if err := json.Unmarshal([]byte(p.Value), &v); err != nil {
				t.Fatalf("value of %q: %v", p.Key, err)
			}
			if !utf8.ValidString(p.Key) || strings.IndexByte(p.Key, 0) >= 0 || !utf8.ValidString(p.Value) || hasNUL(v) {
				t.Fatalf("accepted %q = %q", p.Key, p.Value)
			}
			back[prefix+p.Key] = v
		}
	}
	put(AppPrefix, d.App)
	put(UserPrefix, d.User)
	put("", d.Temp)
	put("", d.Session)
	if len(delta) == 0 {
		normalized = map[string]any{}
	}
	if !reflect.DeepEqual(back, normalized) {
		t.Fatalf("pairs %v, normalized %v", back, normalized)
	}
	want, err := json.Marshal(delta)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	var w, g any
	if json.Unmarshal(want, &w) != nil || json.Unmarshal(got, &g) != nil || !reflect.DeepEqual(w, g) {
		t.Fatalf("delta %s came back as %s", want, got)
	}
	if len(d.App) > 0 {
		app := map[string]json.RawMessage{}
		for _, p := range d.App {
			app[p.Key] = json.RawMessage(p.Value)
		}
		if want, err := json.Marshal(app); err != nil || string(want) != d.AppJSON {
			t.Fatalf("AppJSON %s for app keys %s: %v", d.AppJSON, want, err)
		}
	} else if d.AppJSON != "" {
		t.Fatalf("AppJSON %s without app keys", d.AppJSON)
	}
}

// hasNUL tells whether a decoded JSON value has a NUL in a string or key.
func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if hasNUL(k) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
