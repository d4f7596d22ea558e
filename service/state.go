package service

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/adksession/adksession/cache"
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
	total := 0
	var sc jsonScan
	var w jsonWriter
	for k, v := range delta {
		if k == "" {
			return d, nil, fmt.Errorf("%w: %s: empty key", ErrInvalidArgument, field)
		}
		if !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
			return d, nil, checkText(fmt.Sprintf("%s key %q", field, k), k)
		}
		at := func() string { return fmt.Sprintf("%s[%q]", field, k) }
		w.buf = w.buf[:0]
		if w.value(v, 0); w.err != nil {
			return d, nil, fmt.Errorf("%w: %s: value is not JSON-serializable: %v", ErrInvalidArgument, at(), w.err)
		}
		b := w.buf
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
		p := cache.Pair{Key: k, Value: string(b)}
		switch {
		case strings.HasPrefix(k, AppPrefix):
			p.Key = k[len(AppPrefix):]
			d.App = append(d.App, p)
		case strings.HasPrefix(k, UserPrefix):
			p.Key = k[len(UserPrefix):]
			d.User = append(d.User, p)
		case strings.HasPrefix(k, TempPrefix):
			d.Temp = append(d.Temp, p)
		default:
			d.Session = append(d.Session, p)
		}
	}
	d.AppJSON = pairsObject(d.App)
	return d, normalized, nil
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
		b = append(appendJSONString(b, p.Key), ':')
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
