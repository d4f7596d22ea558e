package service

import (
	"encoding/json"
	"fmt"
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
	var app map[string]json.RawMessage
	total := 0
	var sc jsonScan
	for k, v := range delta {
		if k == "" {
			return d, nil, fmt.Errorf("%w: %s: empty key", ErrInvalidArgument, field)
		}
		if !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0 {
			return d, nil, checkText(fmt.Sprintf("%s key %q", field, k), k)
		}
		at := func() string { return fmt.Sprintf("%s[%q]", field, k) }
		b, err := json.Marshal(v)
		if err != nil {
			return d, nil, fmt.Errorf("%w: %s: value is not JSON-serializable: %v", ErrInvalidArgument, at(), err)
		}
		if len(b) > s.cfg.MaxStateValueBytes {
			return d, nil, fmt.Errorf("%w: %s: value is %d bytes, limit %d (Config.MaxStateValueBytes)", ErrInvalidArgument, at(), len(b), s.cfg.MaxStateValueBytes)
		}
		if total += len(k) + len(b); total > s.cfg.MaxWriteBytes {
			return d, nil, fmt.Errorf("%w: %s: %d+ bytes of keys and values, limit %d (Config.MaxWriteBytes)", ErrInvalidArgument, field, total, s.cfg.MaxWriteBytes)
		}
		if !sc.check(b, false) {
			return d, nil, sc.err(at())
		}
		var norm any
		if err := json.Unmarshal(b, &norm); err != nil {
			return d, nil, fmt.Errorf("%w: %s: %v", ErrInvalidArgument, at(), err)
		}
		normalized[k] = norm
		p := cache.Pair{Key: k, Value: string(b)}
		switch {
		case strings.HasPrefix(k, AppPrefix):
			p.Key = k[len(AppPrefix):]
			d.App = append(d.App, p)
			if app == nil {
				app = map[string]json.RawMessage{}
			}
			app[p.Key] = b
		case strings.HasPrefix(k, UserPrefix):
			p.Key = k[len(UserPrefix):]
			d.User = append(d.User, p)
		case strings.HasPrefix(k, TempPrefix):
			d.Temp = append(d.Temp, p)
		default:
			d.Session = append(d.Session, p)
		}
	}
	if app != nil {
		b, err := json.Marshal(app)
		if err != nil {
			return d, nil, fmt.Errorf("%w: %s: %v", ErrInvalidArgument, field, err)
		}
		d.AppJSON = string(b)
	}
	return d, normalized, nil
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
