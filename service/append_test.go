package service

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
)

func TestSplitDelta(t *testing.T) {
	t.Parallel()
	cfg, err := Config{RedisURL: "redis://unused", MaxStateValueBytes: 64}.withDefaults()
	require.NoError(t, err)
	s := &Service{cfg: cfg}
	d, norm, err := s.splitDelta("actions.stateDelta", map[string]any{
		"k": 1, "n": nil, "user:u": "x", "app:a": []int{1}, "temp:t": true,
		"app:user:x": 2, "user:app:y": 3, "user:temp:z": 4, "apps:k": 5,
	})
	require.NoError(t, err)
	sorted := func(p []cache.Pair) []cache.Pair {
		return slices.SortedFunc(slices.Values(p), func(a, b cache.Pair) int { return strings.Compare(a.Key, b.Key) })
	}
	require.Equal(t, []cache.Pair{{Key: "apps:k", Value: "5"}, {Key: "k", Value: "1"}, {Key: "n", Value: "null"}}, sorted(d.Session))
	require.Equal(t, []cache.Pair{{Key: "app:y", Value: "3"}, {Key: "temp:z", Value: "4"}, {Key: "u", Value: `"x"`}}, sorted(d.User))
	require.Equal(t, []cache.Pair{{Key: "a", Value: "[1]"}, {Key: "user:x", Value: "2"}}, sorted(d.App))
	require.Equal(t, []cache.Pair{{Key: "temp:t", Value: "true"}}, d.Temp)
	require.JSONEq(t, `{"a":[1],"user:x":2}`, d.AppJSON)
	require.Equal(t, map[string]any{
		"k": float64(1), "n": nil, "user:u": "x", "app:a": []any{float64(1)}, "temp:t": true,
		"app:user:x": float64(2), "user:app:y": float64(3), "user:temp:z": float64(4), "apps:k": float64(5),
	}, norm)

	d, norm, err = s.splitDelta("State", nil)
	require.NoError(t, err)
	require.Empty(t, d.AppJSON)
	require.Nil(t, norm)

	cyclic := map[string]any{}
	cyclic["c"] = cyclic
	for name, v := range map[string]any{
		"channel": make(chan int), "func": func() {}, "NaN": math.NaN(), "Inf": math.Inf(1), "cyclic": cyclic,
		"too large": strings.Repeat("x", 70),
	} {
		_, _, err := s.splitDelta("State", map[string]any{"ok": 1, "bad": v})
		require.ErrorIs(t, err, ErrInvalidArgument, name)
		require.Contains(t, err.Error(), `State["bad"]`, name)
	}
	_, _, err = s.splitDelta("State", map[string]any{"": 1})
	require.ErrorIs(t, err, ErrInvalidArgument)
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "a:b{c}/d e\nf%", strings.Repeat("x", MaxIDBytes), "ü"} {
		require.NoError(t, checkID("SessionID", ok, MaxIDBytes), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxIDBytes+1), "\xff", "a\x00"} {
		err := checkID("SessionID", bad, MaxIDBytes)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q", bad)
		require.Contains(t, err.Error(), "SessionID")
	}
}

func eventRecord(t *testing.T, seq int64, ts int64, author string) cache.EventRecord {
	t.Helper()
	b, err := json.Marshal(Event{ID: author, Author: author, Timestamp: time.UnixMicro(ts)})
	require.NoError(t, err)
	return cache.EventRecord{Seq: seq, Ts: ts, JSON: string(b)}
}

// Concurrent appends through one handle may be acknowledged out of order: a
// result older than what the handle holds must not roll its state back.
func TestApplyAppendedOutOfOrder(t *testing.T) {
	t.Parallel()
	sess := &Session{ref: base.SessionRef{App: "a", User: "u", ID: "s"}, rev: 1, lastTs: 100,
		state: map[string]any{"base": float64(1), "app:x": float64(1)}, tempInv: "i"}
	sess.events = []*Event{{ID: "e1", Author: "e1", Timestamp: time.UnixMicro(100).UTC()}}

	// Seq 3 is acknowledged first: the handle missed seq 2.
	ev3 := &Event{ID: "e3", Author: "e3", InvocationID: "i", Timestamp: time.UnixMicro(300).UTC()}
	res3 := &cache.AppendResult{Seq: 3, Ts: 300, CaughtUp: &cache.Snapshot{
		State:  map[string]string{"base": "1", "k2": "2", "k3": "3"},
		User:   map[string]string{"u2": "2"},
		Events: []cache.EventRecord{eventRecord(t, 2, 200, "e2")},
	}}
	require.NoError(t, sess.applyAppended(ev3, res3, map[string]any{"k3": float64(3), "temp:t3": float64(3)}))
	require.Equal(t, int64(3), sess.rev)

	// Then seq 2, caught up as of seq 2 (before seq 3 was written).
	ev2 := &Event{ID: "e2", Author: "e2", InvocationID: "i", Timestamp: time.UnixMicro(200).UTC()}
	res2 := &cache.AppendResult{Seq: 2, Ts: 200, CaughtUp: &cache.Snapshot{
		State: map[string]string{"base": "1", "k2": "2"},
		User:  map[string]string{"u2": "2"},
	}}
	require.NoError(t, sess.applyAppended(ev2, res2, map[string]any{"k2": float64(2), "temp:t2": float64(2), "app:y": float64(2)}))

	require.Equal(t, int64(3), sess.rev, "an older result does not move the revision back")
	require.Equal(t, int64(300), sess.lastTs)
	require.Equal(t, time.UnixMicro(300).UTC(), sess.lastUpdate)
	require.Equal(t, map[string]any{
		"base": float64(1), "k2": float64(2), "k3": float64(3), "user:u2": float64(2),
		"app:x": float64(1), "app:y": float64(2), "temp:t3": float64(3), "temp:t2": float64(2),
	}, sess.state)
	var got []string
	for _, e := range sess.events {
		got = append(got, e.ID)
	}
	require.Equal(t, []string{"e1", "e2", "e3"}, got)
}

// TestMergeEvents: events join a handle's list in timestamp order, once
// each, whether newest (the handle's own append) or older (events a
// concurrent handle appended first). A session's events have distinct
// timestamps (append.lua moves a time that is not after the last one).
func TestMergeEvents(t *testing.T) {
	t.Parallel()
	at := func(id string, sec int64) *Event { return &Event{ID: id, Timestamp: time.Unix(sec, 0)} }
	ids := func(evs []*Event) []string {
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = e.ID
		}
		return out
	}
	got := mergeEvents(nil, []*Event{at("a", 1)})
	got = mergeEvents(got, []*Event{at("c", 3), at("b", 2), at("c", 3), at("d", 4), at("a", 1)})
	require.Equal(t, []string{"a", "b", "c", "d"}, ids(got))
	require.True(t, slices.IsSortedFunc(got, func(x, y *Event) int { return x.Timestamp.Compare(y.Timestamp) }))
}
