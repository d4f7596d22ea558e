package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/service"
)

// TestModelRegressBehind: a session that is behind the database when a
// regress resolves it (ADK appended a row to the database after the
// snapshot, then an event was appended to Redis's copy, which lacks the row)
// has two views, and Redis's copy is a prefix of one of them: the copy's
// view (its shard not taken back, or taken back to the snapshot), or the
// database's once the copy was let go of and read back (cluster single seed
// 767950407224, op #386: the copy of a shard the hold did not take back held
// e1..e6 and e7, 7 events; the model took them for the first 7 of the
// database's view, e1..e6 and ADK's row, so the session was not behind and
// e7 lost, and the next read, which answered the copy, failed).
func TestModelRegressBehind(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	var dbIDs []string
	for i := range 6 {
		dbIDs = append(dbIDs, fmt.Sprintf("e%d", i+1))
	}
	dbIDs = append(dbIDs, "adk")
	setup := func() *driver {
		d, _ := modelClient(k)
		d.m.created(k, 1, nil)
		for i := range 6 {
			d.m.appended(k, &mEvent{ID: fmt.Sprintf("e%d", i+1), Inv: "inv", Ts: int64(10 + i)}, nil, nil, nil, time.Now())
		}
		d.m.flushed()
		// The snapshot is taken here (6 events), then ADK appends at 100,
		// and e7 is answered after the copy's last event (16): the database
		// will hold it at 101.
		d.m.adkAppended(k, &mEvent{ID: "adk", Inv: "adk-inv", Author: "agent", Ts: 100, ADK: true}, nil)
		d.m.appended(k, &mEvent{ID: "e7", Inv: "adk-inv", Ts: 16}, nil, nil, nil, time.Now())
		s := d.m.session(k)
		require.True(t, s.Behind)
		require.Equal(t, append(append([]string(nil), dbIDs...), "e7"), ids(s.Events))
		require.Equal(t, append(append([]string(nil), dbIDs[:6]...), "e7"), ids(s.View))
		return d
	}

	t.Run("copy kept", func(t *testing.T) {
		d := setup()
		lost, behind, err := d.m.regressed(k, dbIDs, 7, "e7", 6)
		require.NoError(t, err)
		require.Empty(t, lost, "Redis's copy holds e7")
		require.True(t, behind, "the copy lacks ADK's row")
		s := d.m.session(k)
		require.Equal(t, append(append([]string(nil), dbIDs...), "e7"), ids(s.Events), "e7 reaches the database after ADK's row")
		require.Equal(t, int64(101), s.Events[7].Ts)
		require.Equal(t, append(append([]string(nil), dbIDs[:6]...), "e7"), ids(s.View))
		require.Equal(t, int64(16), s.View[6].Ts, "the copy's view keeps the time Redis answered")
	})
	t.Run("copy read back from the database", func(t *testing.T) {
		d := setup()
		lost, behind, err := d.m.regressed(k, dbIDs, 8, "e7", 6)
		require.NoError(t, err)
		require.Empty(t, lost)
		require.False(t, behind, "the copy is the database's view")
		require.Equal(t, append(append([]string(nil), dbIDs...), "e7"), ids(d.m.session(k).Events))
	})
	t.Run("copy taken back to the snapshot", func(t *testing.T) {
		d := setup()
		lost, behind, err := d.m.regressed(k, dbIDs, 6, "e6", 6)
		require.NoError(t, err)
		require.Equal(t, []string{"e7"}, lost, "acknowledged after the snapshot, not flushed")
		require.True(t, behind)
		s := d.m.session(k)
		require.Equal(t, dbIDs, ids(s.Events))
		require.Equal(t, dbIDs[:6], ids(s.View))
	})
	t.Run("a flushed event lost", func(t *testing.T) {
		d := setup()
		_, _, err := d.m.regressed(k, dbIDs[:5], 5, "e5", 5)
		require.Error(t, err, "e6 was flushed")
	})
}

// TestModelRegressLostState: an RDB regress loses e3 (acknowledged after
// the snapshot, not flushed), but the sessions row may still hold e3's
// session key and update time: a batch wrote the state Redis held when it
// read e2, which e3 had already changed (docs/design.md, "Redis faults":
// known). The row is allowed them until a later event writes the key and
// the time (standalone single seed 218679370279, checkpoint 0).
func TestModelRegressLostState(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, _ := modelClient(k)
	d.m.created(k, 1, nil)
	d.m.appended(k, &mEvent{ID: "e1", Inv: "inv", Ts: 10, Delta: map[string]any{"k": "one"}}, nil, nil, nil, time.Now())
	d.m.appended(k, &mEvent{ID: "e2", Inv: "inv", Ts: 11, Delta: map[string]any{}}, nil, nil, nil, time.Now())
	d.m.flushed()
	d.m.appended(k, &mEvent{ID: "e3", Inv: "inv", Ts: 12, Delta: map[string]any{"k": "three", "n": "new"}}, nil, nil, nil, time.Now())
	lost, _, err := d.m.regressed(k, []string{"e1", "e2"}, 2, "e2", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"e3"}, lost)

	s := d.m.session(k)
	want := dbSession{State: map[string]any{"k": "one"}, CreateUS: 1, UpdateUS: 11}
	for _, c := range []struct {
		name    string
		row     dbSession
		allowed bool
	}{
		{"as the events", want, true},
		{"with e3's keys and time", dbSession{State: map[string]any{"k": "three", "n": "new"}, CreateUS: 1, UpdateUS: 12}, true},
		{"another value", dbSession{State: map[string]any{"k": "other"}, CreateUS: 1, UpdateUS: 11}, false},
		{"another time", dbSession{State: map[string]any{"k": "one"}, CreateUS: 1, UpdateUS: 13}, false},
	} {
		require.Equal(t, c.allowed, d.m.rowAllowedLocked(k, s, c.row, want), c.name)
	}

	// A session read back from that row stamps its next event after e3's time.
	asked := &service.Event{Timestamp: time.UnixMicro(5).UTC()}
	require.NotEmpty(t, checkTs(s, asked, 13, time.Now(), time.Now(), false), "after e2 it would be 12")
	require.Empty(t, checkTs(s.afterLost(12), asked, 13, time.Now(), time.Now(), false))

	// e4 writes k and takes the row's time: e3's value and time are no longer allowed.
	d.m.appended(k, &mEvent{ID: "e4", Inv: "inv", Ts: 13, Delta: map[string]any{"k": "four"}}, nil, nil, nil, time.Now())
	s = d.m.session(k)
	want = dbSession{State: map[string]any{"k": "four"}, CreateUS: 1, UpdateUS: 13}
	require.False(t, d.m.rowAllowedLocked(k, s, dbSession{State: map[string]any{"k": "three"}, CreateUS: 1, UpdateUS: 13}, want))
	require.False(t, d.m.rowAllowedLocked(k, s, dbSession{State: map[string]any{"k": "four"}, CreateUS: 1, UpdateUS: 12}, want))
	require.True(t, d.m.rowAllowedLocked(k, s, dbSession{State: map[string]any{"k": "four", "n": "new"}, CreateUS: 1, UpdateUS: 13}, want),
		"n, which no later event wrote, may still hold e3's value")
}

// rowAllowedLocked is rowAllowed with m.mu taken.
func (m *Model) rowAllowedLocked(k sessKey, s *mSession, row, want dbSession) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rowAllowed(k, s, row, want)
}

// TestModelRegressIndexLow: a regress lost a session's only event, stamped
// before the session's creation; the user index, no part of a DUMP copy,
// may still order the session by that event's time, below its update time
// (the create's): a walk lists it late, which the model allows until an
// event places it again (cluster concurrent seed 842262357031, checkpoint
// 2: "user listing: ... after a session updated ...").
func TestModelRegressIndexLow(t *testing.T) {
	k := sessKey{App: "a", User: "u", SID: "s"}
	d, _ := modelClient(k)
	d.m.created(k, 100, nil)
	d.m.flushed()
	d.m.appended(k, &mEvent{ID: "e1", Inv: "inv", Ts: 10}, nil, nil, nil, time.Now()) // before the creation
	require.False(t, d.m.indexedElsewhere(k))
	lost, behind, err := d.m.regressed(k, nil, 0, "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"e1"}, lost)
	require.False(t, behind)
	require.True(t, d.m.indexedElsewhere(k), "indexed at e1's time, updated at the creation")

	d.m.appended(k, &mEvent{ID: "e2", Inv: "inv", Ts: 200}, nil, nil, nil, time.Now())
	require.False(t, d.m.indexedElsewhere(k), "e2 places it again")
}
