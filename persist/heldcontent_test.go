package persist

import (
	"testing"
	"time"
)

// TestSameStoredEvent: the event_data the database holds under an id is
// compared with a batch's event as values: key order, escapes and number
// forms aside, and the id, invocation id and time set from the columns.
func TestSameStoredEvent(t *testing.T) {
	e := EventRow{ID: "e1", InvocationID: "inv", Timestamp: time.UnixMicro(1_700_000_000_123_456).UTC(),
		Data: []byte(`{"author":"model","actions":{"state_delta":{"k":1.50,"s":"é"}},"id":"stale","timestamp":1}`)}
	for _, c := range []struct {
		stored string
		same   bool
	}{
		{`{"id": "e1", "timestamp": 1700000000123.456, "invocation_id": "inv", "actions": {"state_delta": {"s": "\u00e9", "k": 15e-1}}, "author": "model"}`, true},
		{`{"id": "e1", "timestamp": 1700000000123.456, "invocation_id": "inv", "actions": {"state_delta": {"s": "é", "k": "1.5"}}, "author": "model"}`, false},
		{`{"id": "e1", "timestamp": 1700000000123.456, "invocation_id": "other", "actions": {"state_delta": {"s": "é", "k": 1.5}}, "author": "model"}`, false},
		{`{"id": "e1", "timestamp": 1700000000123.456, "invocation_id": "inv", "actions": {"state_delta": {"s": "é", "k": 1.5, "x": null}}, "author": "model"}`, false},
		{`{"id": "e1", "timestamp": 1700000000123.456, "invocation_id": "inv", "actions": {"state_delta": {"s": "é", "k": 1e400}}, "author": "model"}`, false},
	} {
		if got := sameStoredEvent([]byte(c.stored), e); got != c.same {
			t.Errorf("%s: same %v, want %v", c.stored, got, c.same)
		}
	}
}
