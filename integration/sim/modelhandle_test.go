package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// TestModelHandleAfterBehindAppend: a handle read from Redis's older copy of
// a session and appended through has never seen the database's newer
// events. Once Redis lets go of the copy (a rebasing flush deletes it) the
// session reads back from the database, and the next append through the
// handle in the default mode is ErrStaleSession: the model must allow it
// (cluster single seed 742397407673, op #175: the model held the handle
// current in both views). The copy's view still finds it current.
func TestModelHandleAfterBehindAppend(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, c := modelClient(k)
	d.m.created(k, 1, nil)
	for i := range 7 {
		d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i)}, nil, nil, nil, time.Now())
	}
	d.m.flushed()
	d.m.copyBehind(k, 6) // the database holds e7, Redis's copy does not

	h := &handle{s: &service.Session{}, inc: 1, rev: 6} // read from the copy (a handle: not AppendTo)
	sent := &service.Event{ID: "e8", InvocationID: "inv", Author: "user", Timestamp: time.UnixMicro(100).UTC()}
	c.adoptAppend(&op{}, c.slots[0], h, sent, "e8", 100, time.Now(), true)
	require.Empty(t, d.failed)

	s := d.m.session(k)
	next := &service.Event{ID: "e9", InvocationID: "inv", Author: "user"}
	db, _ := predict(s, h, next, false)
	view, _ := predict(s.as(s.View), h, next, false)
	require.Equal(t, outcomeNames[outStale], outcomeNames[db], "the database's view: the handle never saw e7")
	require.Equal(t, outcomeNames[outAppend], outcomeNames[view], "the copy's view: the handle is current")
}
