package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestModelTempLostInFlight: an append answered after a loss of its session's
// temp state (its call began before the loss) leaves its temp keys unsure; one
// begun after the loss leaves them sure (seed 815795432732: the append's
// script ran, Redis was killed before the reply, the temp hash was evicted,
// and the retry was answered as a duplicate, which writes nothing again).
func TestModelTempLostInFlight(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	temp := map[string]any{"temp:t1": "v1"}
	m := newModel()
	m.created(k, 1, nil)

	before := time.Now()
	m.tempLostOf(k)
	m.appended(k, &mEvent{ID: "e1", Inv: "inv-1", Ts: 2}, temp, nil, nil, before)
	s := m.session(k)
	require.Equal(t, map[string]any{"temp:t1": "v1"}, s.Temp, "the key may still be there")
	require.Empty(t, s.TempSure, "the loss came after the call began")

	m.appended(k, &mEvent{ID: "e2", Inv: "inv-1", Ts: 3}, temp, nil, nil, time.Now())
	require.Equal(t, map[string]bool{"temp:t1": true}, s.TempSure, "the call began after the loss")
}
