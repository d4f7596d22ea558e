package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestModelUnsettledVisible: the user and app keys of an operation that
// failed on a fault may read as it sent them, to its own client too, until
// it is settled (standalone concurrent seed 611470501151, op #74: create #71
// of client 0 stored its session and failed before its app: step, the
// flusher's repair applied `app:c0.a0` = "v35980", in order after the
// "héllo ☃" of #35, and a Get of another session of client 0 read it while
// the settle's retries of the create still failed; the model wanted
// "héllo ☃").
func TestModelUnsettledVisible(t *testing.T) {
	m, other, k := modelOfTwo("old", "héllo ☃")

	create := map[string]any{"app:c0.a0": "v35980", "user:c0.u0": "new", "k": "v"}
	m.sent(k, create)
	token := &pending{}
	m.unsettled(token, k, create)
	got := map[string]any{"app:c0.a0": "v35980", "user:c0.u0": "new"}
	require.Empty(t, m.stateDiff(other, got, 0, true, ""), "the unsettled create may have been stored")
	require.Empty(t, m.stateDiff(other, map[string]any{"app:c0.a0": "héllo ☃", "user:c0.u0": "old"}, 0, true, ""), "or not")
	require.NotEmpty(t, m.stateDiff(other, map[string]any{"app:c0.a0": "v1", "user:c0.u0": "old"}, 0, true, ""),
		"a value neither sent by the unsettled create nor acknowledged")
	require.Empty(t, m.userStateDiff(userKey{"a", "u"}, map[string]any{"c0.u0": "new"}, 0), "a user state read likewise")

	m.settled(token)
	require.NotEmpty(t, m.stateDiff(other, got, 0, true, ""), "settled without the create: its values are gone")
}

// TestModelRacedSettle: an operation found stored when it is settled (a
// create answered ErrAlreadyExists, an event found in its session) was
// stored by one of its attempts: the first, before the writes its client
// acknowledged meanwhile (which then win), or a later one, after them. Such
// a key may read as either until it is written again.
func TestModelRacedSettle(t *testing.T) {
	m, other, k := modelOfTwo("before", "before")

	create := map[string]any{"app:c0.a0": "create", "user:c0.u0": "create", "user:c0.u1": "create"}
	writes := m.writesOf(k, create)
	// Acknowledged while the create is unsettled.
	m.appended(other, &mEvent{ID: "e2", Ts: 3}, nil, map[string]any{"c0.u0": "since"}, map[string]any{"c0.a0": "since"}, time.Now())

	raced := m.racedSince(k, create, writes)
	require.Equal(t, map[string]any{"app/a/c0.a0": "since", "user/a/u/c0.u0": "since"}, raced)
	m.created(k, 4, create)
	m.mayReadAs(raced)
	for _, v := range []string{"since", "create"} {
		got := map[string]any{"app:c0.a0": v, "user:c0.u0": v, "user:c0.u1": "create"}
		require.Empty(t, m.stateDiff(k, got, 0, true, ""), "%s may win", v)
	}
	require.NotEmpty(t, m.stateDiff(k, map[string]any{"app:c0.a0": "before", "user:c0.u0": "since", "user:c0.u1": "create"}, 0, true, ""),
		"the value before the create was sent was written over")

	m.appended(other, &mEvent{ID: "e3", Ts: 5}, nil, nil, map[string]any{"c0.a0": "later"}, time.Now())
	require.NotEmpty(t, m.stateDiff(k, map[string]any{"app:c0.a0": "since", "user:c0.u0": "since", "user:c0.u1": "create"}, 0, true, ""),
		"written again: exact again")
}

// modelOfTwo is a model with session other of client 0, whose event set
// user:c0.u0 and app:c0.a0 to the values given, and k, a session of the
// same user not created yet.
func modelOfTwo(user, app string) (m *Model, other, k sessKey) {
	other = sessKey{App: "a", User: "u", SID: "c0-s2"}
	k = sessKey{App: "a", User: "u", SID: "c0-s0"}
	m = newModel()
	m.created(other, 1, nil)
	m.appended(other, &mEvent{ID: "e1", Ts: 2}, nil, map[string]any{"c0.u0": user}, map[string]any{"c0.a0": app}, time.Now())
	return m, other, k
}
