package persist_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

// A flusher applies a batch; a loader reads the session back.
func Example() {
	dir, err := os.MkdirTemp("", "adksession")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	url := "sqlite://" + filepath.Join(dir, "sessions.db")

	ctx := context.Background()
	if err := persist.Migrate(ctx, url); err != nil { // adksession migrate
		log.Fatal(err)
	}
	s, err := persist.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	key := base.SessionRef{App: "weather", User: "alice", ID: "s1"}
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	said := created.Add(1500 * time.Microsecond)
	batch := &persist.Batch{Sessions: []persist.SessionUpsert{{
		Key: key, Incarnation: created.UnixMicro(), Rev: 1,
		State:      map[string]json.RawMessage{"city": json.RawMessage(`"Paris"`)},
		CreateTime: created, UpdateTime: said,
		Events: []persist.EventRow{{ID: "e1", InvocationID: "inv1", Timestamp: said, Seq: 1,
			Data: []byte(`{"author":"user","content":{"role":"user","parts":[{"text":"hi"}]}}`)}},
	}}}
	// Applying a batch again (at-least-once delivery) changes nothing.
	for range 2 {
		if err := s.Apply(ctx, batch); err != nil {
			log.Fatal(err)
		}
	}

	ls, err := s.LoadSession(ctx, key, persist.Window{NumRecentEvents: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ls.Rev, string(ls.State["city"]), len(ls.Events), ls.Events[0].Seq)
	fmt.Println(string(ls.Events[0].Data))
	// Output:
	// 1 "Paris" 1 1
	// {"author":"user","content":{"role":"user","parts":[{"text":"hi"}]},"id":"e1","invocation_id":"inv1","timestamp":1735787045001.5}
}
