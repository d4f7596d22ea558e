package service

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/adksession/adksession/cache/base"
)

// BenchmarkPlanAppend: the Go side of an append before its round trip
// (checks, event encoding, script arguments), for the event of the
// integration append benchmark: a 200-byte text reply setting a session, a
// user: and a temp: key.
func BenchmarkPlanAppend(b *testing.B) {
	s := testService(b, nil)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5)[:200]
	ev := &Event{InvocationID: "inv-1", Author: "agent",
		Content: json.RawMessage(`{"role":"model","parts":[{"text":"` + text + `"}]}`),
		Actions: EventActions{StateDelta: map[string]any{"counter": 7.0, "user:last": 7.0, "temp:step": 2.0}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.planAppend(base.SessionRef{App: "bench", User: "u1", ID: "s1"}, ev); err != nil {
			b.Fatal(err)
		}
	}
}
