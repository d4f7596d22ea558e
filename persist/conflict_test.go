package persist

import (
	"context"
	"fmt"
	"testing"
)

// TestApplyReusedIDAboveTheRev: an event of a batch the rebase does not
// read (its seq above the row's rev, the row adksession's own) under the id
// of an event the database holds with other content. The insert leaves the
// database's row alone; before, nothing said the batch's event was not
// written. It is reported in Outcome.Conflicts (the flusher dead-letters
// it), by Apply and by ApplyEach; the database keeps its own event. The
// same event sent again (other time, same content) is no conflict.
func TestApplyReusedIDAboveTheRev(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, each := range []bool{false, true} {
			t.Run(fmt.Sprintf("each=%v", each), func(t *testing.T) {
				ctx := context.Background()
				s := migrated(t, b)
				k := skey("s1")
				apply(t, s, &Batch{Sessions: []SessionUpsert{upsert(k, inc1, 0, 2)}})
				d := dump(t, s)

				run := func(u SessionUpsert) *Batch {
					batch := &Batch{Sessions: []SessionUpsert{u}}
					if each {
						rejected, err := s.ApplyEach(ctx, batch)
						must(t, err)
						same(t, "rejected", len(rejected), 0)
					} else {
						must(t, s.Apply(ctx, batch))
					}
					return batch
				}
				retry := upsert(k, inc1, 3, 3)
				retry.Events[0].ID, retry.Events[0].InvocationID, retry.Events[0].Data = eventID(inc1, 1), "inv-1", storageJSON(1) // e1 sent again at a new time
				same(t, "a retry: no conflict", run(retry).Outcome.Conflicts, []Conflict(nil))

				other := upsert(k, inc1, 4, 4)
				other.Events[0].ID = eventID(inc1, 1)
				other.Events[0].Data = []byte(`{"author":"user","invocation_id":"other","actions":{"state_delta":{"other":true}}}`)
				got := run(other).Outcome.Conflicts
				id := eventID(inc1, 1)
				same(t, "conflicts", got, []Conflict{{Key: k, EventID: id, Seq: 4,
					Reason: fmt.Sprintf("event %s of session app/u1/s1: %s", id, ReasonReusedID)}})
				same(t, "the database keeps its own events", dump(t, s)["events"], d["events"])
			})
		}
	})
}
