package service

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/eventjson"
)

// State key prefixes, checked in this order ("app:user:x" is the app key "user:x").
const (
	AppPrefix  = "app:"
	UserPrefix = "user:"
	TempPrefix = "temp:"
)

// splitDelta validates a state delta and splits it by scope, with every
// value JSON-encoded. field names the delta in errors ("State",
// "actions.stateDelta"). The decoded form of each value (what a later Get
// returns) is put in normalized, keyed as in delta.
//
// A delta has at most Config.MaxDeltaKeys keys; keys are non-empty text
// (checkText); each value is at most Config.MaxStateValueBytes of JSON that
// checkJSON accepts; keys and values together are at most
// Config.MaxWriteBytes.
func (s *Service) splitDelta(field string, delta map[string]any) (d cache.StateDelta, normalized map[string]any, err error) {
	if len(delta) == 0 {
		return d, nil, nil
	}
	if len(delta) > s.cfg.MaxDeltaKeys {
		return d, nil, fmt.Errorf("%w: %s: %d keys, limit %d (Config.MaxDeltaKeys)", ErrInvalidArgument, field, len(delta), s.cfg.MaxDeltaKeys)
	}
	normalized = make(map[string]any, len(delta))
	// One slab holds the pairs of every scope, one string every value.
	var count [4]int
	for k := range delta {
		count[scopeOf(k)]++
	}
	slab := make([]cache.Pair, len(delta))
	var scopes [4][]cache.Pair // app, user, temp, session: parts of slab
	var base [4]int
	for i, off := 0, 0; i < 4; i++ {
		base[i] = off
		scopes[i] = slab[off : off : off+count[i]]
		off += count[i]
	}
	var small [16][2]int
	spans := small[:0] // where each pair's value is in w.buf, by slab index
	if len(delta) > len(small) {
		spans = make([][2]int, len(delta))
	}
	spans = spans[:len(delta)]
	total := 0
	sc := getScan()
	defer putScan(sc)
	var w jsonWriter
	for k, v := range delta {
		if k == "" {
			return d, nil, fmt.Errorf("%w: %s: empty key", ErrInvalidArgument, field)
		}
		if !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
			return d, nil, checkText(fmt.Sprintf("%s key %q", field, k), k)
		}
		at := func() string { return fmt.Sprintf("%s[%q]", field, k) }
		start := len(w.buf)
		if w.value(v, 0); w.err != nil {
			return d, nil, fmt.Errorf("%w: %s: value is not JSON-serializable: %v", ErrInvalidArgument, at(), w.err)
		}
		b := w.buf[start:]
		if len(b) > s.cfg.MaxStateValueBytes {
			return d, nil, fmt.Errorf("%w: %s: value is %d bytes, limit %d (Config.MaxStateValueBytes)", ErrInvalidArgument, at(), len(b), s.cfg.MaxStateValueBytes)
		}
		if total += len(k) + len(b); total > s.cfg.MaxWriteBytes {
			return d, nil, fmt.Errorf("%w: %s: %d+ bytes of keys and values, limit %d (Config.MaxWriteBytes)", ErrInvalidArgument, field, total, s.cfg.MaxWriteBytes)
		}
		if !sc.check(b, false) {
			return d, nil, sc.err(at())
		}
		norm, err := normalize(v, b)
		if err != nil {
			return d, nil, fmt.Errorf("%w: %s: %v", ErrInvalidArgument, at(), err)
		}
		normalized[k] = norm
		scope := scopeOf(k)
		spans[base[scope]+len(scopes[scope])] = [2]int{start, len(w.buf)}
		scopes[scope] = append(scopes[scope], cache.Pair{Key: k[len(scopePrefixes[scope]):]})
	}
	values := string(w.buf)
	for i, sp := range spans {
		slab[i].Value = values[sp[0]:sp[1]]
	}
	d.App, d.User, d.Temp, d.Session = scopes[0], scopes[1], scopes[2], scopes[3]
	d.AppJSON = pairsObject(d.App)
	return d, normalized, nil
}

// scopePrefixes are the prefixes state keys lose in their scope's pairs,
// by scopeOf's index: app, user, temp (temp: keys stay whole), session.
var scopePrefixes = [4]string{AppPrefix, UserPrefix, "", ""}

// scopeOf is the scope of a state key: 0 app, 1 user, 2 temp, 3 session.
func scopeOf(k string) int {
	switch {
	case strings.HasPrefix(k, AppPrefix):
		return 0
	case strings.HasPrefix(k, UserPrefix):
		return 1
	case strings.HasPrefix(k, TempPrefix):
		return 2
	}
	return 3
}

// normalize is v as a Get decodes it from b, its JSON: v itself for the
// values JSON keeps as they are (a string here is valid UTF-8: jsonScan
// refused the \ufffd json.Marshal writes for anything else).
func normalize(v any, b []byte) (any, error) {
	switch v.(type) {
	case nil, string, bool, float64:
		return v, nil
	}
	var norm any
	err := json.Unmarshal(b, &norm)
	return norm, err
}

// pairsObject is pairs as one JSON object, keys sorted as json.Marshal
// sorts a map's ("" when empty); pairs is sorted in place.
func pairsObject(pairs []cache.Pair) string {
	if len(pairs) == 0 {
		return ""
	}
	slices.SortFunc(pairs, func(a, b cache.Pair) int { return strings.Compare(a.Key, b.Key) })
	var b []byte
	for i, p := range pairs {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(eventjson.AppendString(b, p.Key, true), ':')
		b = append(b, p.Value...)
	}
	return string(append(b, '}'))
}

// mergedState builds the merged view of a cached snapshot: app and user keys
// get their prefixes back; temp keys are included when present.
func mergedState(snap *cache.Snapshot) (map[string]any, error) {
	out := make(map[string]any, len(snap.State)+len(snap.User)+len(snap.App)+len(snap.Temp))
	add := func(prefix string, m map[string]string) error {
		for k, v := range m {
			var x any
			if err := json.Unmarshal([]byte(v), &x); err != nil {
				return fmt.Errorf("state key %s%s: %w", prefix, k, err)
			}
			out[prefix+k] = x
		}
		return nil
	}
	for _, part := range []struct {
		prefix string
		m      map[string]string
	}{{AppPrefix, snap.App}, {UserPrefix, snap.User}, {"", snap.State}, {"", snap.Temp}} {
		if err := add(part.prefix, part.m); err != nil {
			return nil, err
		}
	}
	return out, nil
}
