package testenv

import (
	"encoding/json"
	"strings"
)

// JSEvent is what ADK JS's getActiveEvents reads of an event: its id, its
// timestamp (epoch microseconds) and its CompactedEvent's isCompacted and
// endTime (top-level members, raw JSON; nil when absent).
type JSEvent struct {
	ID                   string
	Micros               int64
	IsCompacted, EndTime json.RawMessage
}

// ADKJSActive is ADK JS 2.0.0's getActiveEvents
// (dist/esm/context/compaction_utils.js), which ContentRequestProcessor runs
// on the session's events before getContents, transliterated: the ids of
// the last compacted event and the other events after its endTime, or of
// all events when none is compacted. ADK JS's timestamps are milliseconds.
// service's TestCompactedViewProperty judges the compacted view with it;
// integration's TestADKJSCompactedViewProperty holds it to ADK JS's own.
func ADKJSActive(events []JSEvent) []string {
	compacted := func(e JSEvent) bool { return strings.TrimSpace(string(e.IsCompacted)) == "true" }
	latest := -1
	for i, e := range events {
		if compacted(e) {
			latest = i
		}
	}
	out := []string{}
	if latest < 0 {
		for _, e := range events {
			out = append(out, e.ID)
		}
		return out
	}
	out = append(out, events[latest].ID)
	var end float64
	hasEnd := json.Unmarshal(events[latest].EndTime, &end) == nil // a JS comparison with undefined is false
	for _, e := range events {
		if !compacted(e) && hasEnd && float64(e.Micros)/1000 > end {
			out = append(out, e.ID)
		}
	}
	return out
}
