package persist

import (
	"bytes"
	"encoding/json"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"github.com/adksession/adksession/cache/eventjson"
)

// sameStoredEvent tells whether stored, the event_data the database holds
// under e's id, is e as Apply would store it at e's time: the same event
// (a replay, or a retry stored again), not another one under a reused id.
// Both are compared as decoded values, so the order of object keys (jsonb
// reorders them), string escapes and number forms do not matter. A row
// that cannot be read is taken for the same event: the flusher then does
// what it did before content was compared.
func sameStoredEvent(stored []byte, e EventRow) bool {
	return compareStored(stored, e, false)
}

// sameEventAnyTime tells whether stored, the event_data the database holds
// under e's id, is e but for its time: e sent again (a retry, stored again
// by an older copy of the session at a new time), not another event under
// a reused id. The top-level "timestamp" is left out on both sides (a row
// ADK wrote holds it in seconds); a row that cannot be read is taken for
// the same event, as in sameStoredEvent.
func sameEventAnyTime(stored []byte, e EventRow) bool {
	return compareStored(stored, e, true)
}

func compareStored(stored []byte, e EventRow, anyTime bool) bool {
	data, err := eventjson.WithColumns(e.Data, e.ID, e.InvocationID, e.Timestamp)
	if err != nil {
		return true
	}
	x, errX := exactJSON(stored)
	y, errY := exactJSON(data)
	if errX != nil || errY != nil {
		return true
	}
	if anyTime {
		for _, v := range []any{x, y} {
			if m, ok := v.(map[string]any); ok {
				delete(m, "timestamp")
			}
		}
	}
	return reflect.DeepEqual(x, y)
}

// exactJSON decodes data with every number as its exact rational value in
// lowest terms (1.50 and 15e-1 are one number; jsonb writes 1e2 as 100).
func exactJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return exactNumbers(v), nil
}

// exactNumber is a number decoded by exactJSON (a string stays a string).
type exactNumber string

// maxExactExponent bounds the exponents exactJSON expands.
const maxExactExponent = 400

func exactNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i := strings.IndexAny(string(v), "eE"); i >= 0 {
			if exp, err := strconv.Atoi(string(v[i+1:])); err != nil || exp > maxExactExponent || exp < -maxExactExponent {
				return exactNumber(v) // too large to expand: as written
			}
		}
		if r, ok := new(big.Rat).SetString(string(v)); ok {
			return exactNumber(r.RatString())
		}
		return exactNumber(v)
	case map[string]any:
		for k, x := range v {
			v[k] = exactNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = exactNumbers(x)
		}
	}
	return v
}
