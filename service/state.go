package service

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/adksession/adksession/cache"
)

// State key prefixes, checked in this order ("app:user:x" is the app key "user:x").
const (
	AppPrefix  = "app:"
	UserPrefix = "user:"
	TempPrefix = "temp:"
)

// splitDelta validates a state delta and splits it by scope, with every
// value JSON-encoded. field names the delta in errors ("state",
// "actions.stateDelta"). The decoded form of each value (what a later Get
// returns) is put in normalized, keyed as in delta.
func (s *Service) splitDelta(field string, delta map[string]any) (d cache.StateDelta, normalized map[string]any, err error) {
	if len(delta) == 0 {
		return d, nil, nil
	}
	normalized = make(map[string]any, len(delta))
	var app map[string]json.RawMessage
	for k, v := range delta {
		if k == "" {
			return d, nil, fmt.Errorf("%w: %s: empty key", ErrInvalidArgument, field)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return d, nil, fmt.Errorf("%w: %s[%q]: value is not JSON-serializable: %v", ErrInvalidArgument, field, k, err)
		}
		if len(b) > s.cfg.MaxStateValueBytes {
			return d, nil, fmt.Errorf("%w: %s[%q]: value is %d bytes, limit %d", ErrInvalidArgument, field, k, len(b), s.cfg.MaxStateValueBytes)
		}
		var norm any
		if err := json.Unmarshal(b, &norm); err != nil {
			return d, nil, fmt.Errorf("%w: %s[%q]: %v", ErrInvalidArgument, field, k, err)
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
