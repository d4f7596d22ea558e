package service

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// ev is an event of invocation inv; rewind, when set, makes it a rewind event.
func ev(id, inv, rewind string) *Event {
	return &Event{ID: id, InvocationID: inv, Actions: EventActions{RewindBeforeInvocationID: rewind}}
}

func ids(events []*Event) []string {
	out := []string{}
	for _, e := range events {
		out = append(out, e.ID)
	}
	return out
}

func TestVisibleEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []*Event
		want   []string
	}{
		{"empty", nil, []string{}},
		{"no rewinds", []*Event{ev("a1", "A", ""), ev("b1", "B", "")}, []string{"a1", "b1"}},
		{"rewind before B hides B, C and itself",
			[]*Event{ev("a1", "A", ""), ev("a2", "A", ""), ev("b1", "B", ""), ev("b2", "B", ""), ev("c1", "C", ""), ev("r", "R", "B")},
			[]string{"a1", "a2"}},
		{"events after the rewind stay",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("r", "R", "B"), ev("d1", "D", "")},
			[]string{"a1", "d1"}},
		{"rewind before the first invocation hides everything before it",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("r", "R", "A"), ev("c1", "C", "")},
			[]string{"c1"}},
		{"unknown invocation hides only the rewind",
			[]*Event{ev("a1", "A", ""), ev("r", "R", "Z"), ev("b1", "B", "")},
			[]string{"a1", "b1"}},
		{"invocation only after the rewind: hides only the rewind",
			[]*Event{ev("a1", "A", ""), ev("r", "R", "B"), ev("b1", "B", "")},
			[]string{"a1", "b1"}},
		{"from the first event of the invocation, even when it resumed later",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("c1", "C", ""), ev("b2", "B", ""), ev("r", "R", "B")},
			[]string{"a1"}},
		{"nested: a later rewind hides an earlier rewind and what it hid",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("c1", "C", ""), ev("r1", "R1", "C"), ev("d1", "D", ""), ev("r2", "R2", "B")},
			[]string{"a1"}},
		{"rewind of a rewind invocation",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("r1", "R1", "B"), ev("c1", "C", ""), ev("r2", "R2", "R1")},
			[]string{"a1", "b1"}},
		{"two rewinds in a row",
			[]*Event{ev("a1", "A", ""), ev("b1", "B", ""), ev("r1", "R1", "B"), ev("r2", "R2", "A")},
			[]string{}},
		{"nil events dropped", []*Event{ev("a1", "A", ""), nil, ev("b1", "B", "")}, []string{"a1", "b1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]*Event(nil), tc.events...)
			require.Equal(t, tc.want, ids(VisibleEvents(tc.events)))
			require.Equal(t, in, tc.events, "input modified")
		})
	}
}
