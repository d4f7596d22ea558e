package service

import "slices"

// VisibleEvents returns the events an LLM request should see, as ADK's
// _apply_rewinds does: walking backwards from the newest event, a rewind
// event (Actions.RewindBeforeInvocationID = X) hides itself and every event
// from the first event of invocation X up to it; a rewind naming an
// invocation with no earlier event hides only itself. Rewinds of rewinds
// follow from the walk: a rewind hidden by a later one has no effect. The
// result keeps the order of events; nil events are dropped. events is not
// modified.
func VisibleEvents(events []*Event) []*Event {
	first := make(map[string]int, len(events))
	for i, e := range events {
		if e == nil {
			continue
		}
		if _, ok := first[e.InvocationID]; !ok {
			first[e.InvocationID] = i
		}
	}
	out := make([]*Event, 0, len(events))
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e == nil {
			continue
		}
		if x := e.Actions.RewindBeforeInvocationID; x != "" {
			if j, ok := first[x]; ok && j < i {
				i = j
			}
			continue
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	return out
}
