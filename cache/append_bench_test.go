package cache

import (
	"testing"

	"github.com/adksession/adksession/cache/base"
)

// BenchmarkAppendCommand: building append.lua's keys and arguments for an
// event with a session, a user: and a temp: key.
func BenchmarkAppendCommand(b *testing.B) {
	keys, err := NewKeys("bench", 16)
	if err != nil {
		b.Fatal(err)
	}
	s := NewStore(nil, Options{Keys: keys, Durable: true})
	a := AppendArgs{SessionRef: base.SessionRef{App: "bench", User: "u1", ID: "0b6f1c9e-6a4f-4c1e-9a53-2f0f8d7e0c11"}, HandleRev: 41, Incarnation: 1735787045123456,
		Ts: 1735787045223456, InvocationID: "inv-8", EventID: "8c0e2a55-0a3f-4f43-b6de-8b7d8f5a9e01",
		EventPre: `{"id":"8c0e2a55-0a3f-4f43-b6de-8b7d8f5a9e01","invocationId":"inv-8","author":"agent","timestamp":`, EventPost: `}`,
		Delta: StateDelta{Session: []Pair{{"counter", "41"}}, User: []Pair{{"last", "41"}}, Temp: []Pair{{"temp:step", "1"}}}}
	b.ReportAllocs()
	for b.Loop() {
		s.appendCommand(a)
	}
}
