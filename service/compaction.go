package service

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"time"
)

// CompactedView returns the events of a history (in append order) that ADK's
// context building needs to give the model exactly the input the whole
// history gives it, for every branch and isolation scope an agent may read
// it with: ADK Python's _get_contents (main bb56aa56: _apply_rewinds, the
// branch and isolation-scope filter, _process_compaction_events,
// _recover_compacted_function_calls, _build_task_input_user_content) on a
// history with actions.compaction events, ADK JS 2.0.0's getActiveEvents on
// a history with top-level isCompacted events (both rules, and both sets,
// when a history holds both forms). A history without compaction events is
// returned whole. events is not modified; nil events are dropped.
//
// The view (docs/design.md, "The compacted view") keeps, of ADK Python's
// form:
//
//   - the rewind events no later rewind hides, and the first event of the
//     invocation each one rewinds (so that it hides what it hid), and drops
//     the other rewound events;
//   - the compaction events no other visible compaction subsumes (a
//     compaction with a branch, an isolation scope or a content ADK's filter
//     drops is always kept and covers nothing);
//   - every visible event whose timestamp no kept compaction covers, and
//     every event with an isolation scope (an unscoped compaction never
//     covers it for a scoped agent);
//   - for every function response in what is kept (compacted contents too),
//     the visible events that call it, and for every call of those events,
//     the visible events that answer it (the sibling responses);
//   - for every isolation scope an event carries, the first event whose
//     function call of that id has arguments (a scoped agent's first turn).
//
// Of ADK JS's form it keeps the last compacted event and the other events
// after its endTime.
//
// The selection is built to be read from an index of compaction events
// (seq, start and end times, the seq range they cover), of rewinds, of
// function call and response ids and of scoped events, plus range reads of
// the uncovered events; see docs/design.md for that algorithm and its
// O(log n + k) cost for k events returned.
func CompactedView(events []*Event) []*Event {
	present := make([]*Event, 0, len(events))
	for _, e := range events {
		if e != nil {
			present = append(present, e)
		}
	}
	keep := compactedViewIndexes(present)
	out := make([]*Event, len(keep))
	for i, j := range keep {
		out[i] = present[j]
	}
	return out
}

// compactedViewIndexes is CompactedView of events without nil, as the
// indexes of the events kept, ascending.
func compactedViewIndexes(events []*Event) []int {
	hasPython, hasJS := false, false
	for _, e := range events {
		hasPython = hasPython || hasCompaction(e)
		hasJS = hasJS || isJSCompacted(e)
	}
	keep := make([]bool, len(events))
	switch {
	case hasPython:
		pythonView(events, keep)
		if hasJS {
			jsView(events, keep)
		}
	case hasJS:
		jsView(events, keep)
	default:
		return keepAll(events)
	}
	var out []int
	for i, k := range keep {
		if k {
			out = append(out, i)
		}
	}
	return out
}

func keepAll(events []*Event) []int {
	out := make([]int, len(events))
	for i := range out {
		out[i] = i
	}
	return out
}

// pythonView marks in keep the events ADK Python's context building needs.
func pythonView(events []*Event, keep []bool) {
	for i := 1; i < len(events); i++ {
		// The view's order argument needs time order = append order (as
		// AppendEvent makes it): ADK sorts by timestamp once it compacts.
		if !events[i].Timestamp.After(events[i-1].Timestamp) {
			for j := range keep {
				keep[j] = true
			}
			return
		}
	}
	visible := markRewinds(events, keep)
	keepScopeOrigins(events, keep)

	comps := pythonCompactions(events)
	kept := frontier(plainCompactions(events, comps, visible, keep))
	for _, r := range kept {
		keep[r.seq] = true
	}

	// The events no kept compaction covers. A compaction-marked event ADK
	// cannot read as one is an event like the others.
	for i, e := range events {
		if !visible[i] || keep[i] {
			continue
		}
		if comps[i] != nil {
			continue
		}
		if _, scoped := isolationScope(e); scoped || !covered(kept, e.Timestamp.UnixMicro()) {
			keep[i] = true
		}
	}
	keepCallsOfResponses(events, comps, visible, keep)
}

// pythonCompactions is pythonCompaction of each of events, read once: nil
// for an event that has none.
func pythonCompactions(events []*Event) []*compactionRange {
	out := make([]*compactionRange, len(events))
	for i, e := range events {
		if r, ok := pythonCompaction(e); ok {
			r.seq = i
			out[i] = new(compactionRange)
			*out[i] = r // r itself stays on the stack: one allocation per compaction only
		}
	}
	return out
}

// plainCompactions returns the visible compactions that cover: the plain
// ones (no branch, no scope, a content ADK's filter keeps). It marks the
// others in keep: they are kept and cover nothing.
func plainCompactions(events []*Event, comps []*compactionRange, visible, keep []bool) []compactionRange {
	var plain []compactionRange
	for i, e := range events {
		if !visible[i] || comps[i] == nil {
			continue
		}
		r := *comps[i]
		if _, scoped := isolationScope(e); scoped || e.Branch != "" || droppedByContent(e) {
			keep[i] = true
			continue
		}
		plain = append(plain, r)
	}
	return plain
}

// markRewinds marks in keep the rewind events that act (no later rewind
// hides them) and the first event of each one's invocation, as ADK's
// _apply_rewinds walks the history; it returns which events that walk
// leaves visible.
func markRewinds(events []*Event, keep []bool) []bool {
	first := make(map[string]int)
	for i, e := range events {
		if _, ok := first[e.InvocationID]; !ok {
			first[e.InvocationID] = i
		}
	}
	visible := make([]bool, len(events))
	for i := len(events) - 1; i >= 0; i-- {
		x := events[i].Actions.RewindBeforeInvocationID
		if x == "" {
			visible[i] = true
			continue
		}
		keep[i] = true
		if j, ok := first[x]; ok && j < i {
			keep[j] = true
			i = j
		}
	}
	return visible
}

// keepScopeOrigins marks, for every isolation scope an event carries, the
// first event with a function call of that id and arguments: ADK builds a
// scoped agent's first turn from it, out of the whole history.
func keepScopeOrigins(events []*Event, keep []bool) {
	scopes := map[string]bool{}
	for _, e := range events {
		if s, ok := isolationScope(e); ok {
			scopes[s] = true
		}
	}
	for i, e := range events {
		if len(scopes) == 0 {
			return
		}
		for _, p := range contentParts(e.Content) {
			if c := p.FunctionCall; c != nil && scopes[c.ID] && len(c.Args) > 0 {
				keep[i] = true
				delete(scopes, c.ID)
			}
		}
	}
}

// keepCallsOfResponses marks, for every function response of a kept
// visible event, every visible event that calls it, and for every call of
// those, every visible event that answers it: what
// _recover_compacted_function_calls may put back, under any filter.
func keepCallsOfResponses(events []*Event, comps []*compactionRange, visible, keep []bool) {
	// Each event's parts are read once, and only as far as needed: the
	// common view answers no call, and then only the kept events are read.
	parts := make([][]contentPart, len(events))
	read := make([]bool, len(events))
	partsOf := func(i int) []contentPart {
		if !read[i] {
			parts[i], read[i] = contentParts(events[i].Content), true
		}
		return parts[i]
	}
	// Every kept event's responses (a compaction's: its compacted content's),
	// a superset of what the model gets: the more calls kept, the same.
	var answered []string
	for i := range events {
		if visible[i] && keep[i] {
			if r := comps[i]; r != nil {
				answered = appendResponseIDs(answered, r.content)
			} else {
				answered = appendPartResponseIDs(answered, partsOf(i))
			}
		}
	}
	if len(answered) == 0 {
		return
	}
	calls, responses := map[string][]int{}, map[string][]int{}
	for i := range events {
		if !visible[i] {
			continue
		}
		for _, p := range partsOf(i) {
			if c := p.FunctionCall; c != nil && c.ID != "" {
				calls[c.ID] = append(calls[c.ID], i)
			}
			if r := p.FunctionResponse; r != nil && r.ID != "" {
				responses[r.ID] = append(responses[r.ID], i)
			}
		}
	}
	siblings := map[int]bool{}
	for _, id := range answered {
		for _, j := range calls[id] {
			keep[j] = true
			siblings[j] = true
		}
	}
	for j := range siblings {
		for _, p := range partsOf(j) {
			if c := p.FunctionCall; c != nil && c.ID != "" {
				for _, k := range responses[c.ID] {
					keep[k] = true
				}
			}
		}
	}
}

func appendResponseIDs(ids []string, content json.RawMessage) []string {
	return appendPartResponseIDs(ids, contentParts(content))
}

// appendPartResponseIDs appends the ids of the function responses of parts.
func appendPartResponseIDs(ids []string, parts []contentPart) []string {
	for _, p := range parts {
		if r := p.FunctionResponse; r != nil && r.ID != "" {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// jsView marks in keep what ADK JS's getActiveEvents returns: the last
// compacted event and the others after its endTime (all others when its
// endTime does not read as a time: getActiveEvents filters them itself).
func jsView(events []*Event, keep []bool) {
	last, end, known := lastJSCompacted(events)
	keep[last] = true
	for i, e := range events {
		if !isJSCompacted(e) && (!known || e.Timestamp.After(end)) {
			keep[i] = true
		}
	}
}

// lastJSCompacted is the index of the last ADK JS compacted event of events
// (-1: none) and its endTime; known is false when that does not read as a
// time.
func lastJSCompacted(events []*Event) (last int, end time.Time, known bool) {
	last = -1
	for i, e := range events {
		if isJSCompacted(e) {
			last = i
		}
	}
	if last < 0 {
		return last, end, false
	}
	end, err := parseEpoch(events[last].Extra["endTime"])
	return last, end, err == nil && len(events[last].Extra["endTime"]) > 0
}

// compactionRange is a compaction event's range in microseconds, both ends
// included, its index in the history and its compacted content.
type compactionRange struct {
	seq        int
	start, end int64
	content    json.RawMessage
}

// frontier returns the ranges no other subsumes, as ADK Python decides it
// (a range within another, or equal to a later one's, is subsumed), sorted
// by start; their ends ascend too.
func frontier(ranges []compactionRange) []compactionRange {
	sorted := slices.Clone(ranges)
	sort.Slice(sorted, func(a, b int) bool {
		x, y := sorted[a], sorted[b]
		if x.start != y.start {
			return x.start < y.start
		}
		if x.end != y.end {
			return x.end > y.end
		}
		return x.seq > y.seq
	})
	var out []compactionRange
	for _, r := range sorted {
		// Every range before r starts earlier, or at its start and ends
		// later, or is equal and later: r is subsumed exactly when one of
		// them reaches its end.
		if len(out) == 0 || r.end > out[len(out)-1].end {
			out = append(out, r)
		}
	}
	return out
}

// covered reports whether a range of the frontier holds the microsecond ts.
func covered(frontier []compactionRange, ts int64) bool {
	i := sort.Search(len(frontier), func(i int) bool { return frontier[i].start > ts })
	return i > 0 && frontier[i-1].end >= ts
}

// hasCompaction reports whether e carries ADK Python's actions.compaction.
func hasCompaction(e *Event) bool {
	c := bytes.TrimSpace(e.Actions.Compaction)
	return len(c) > 0 && !bytes.Equal(c, []byte("null"))
}

// pythonCompaction reads e's actions.compaction (API or storage form); ok
// is false when e has none or one without the three fields ADK requires.
func pythonCompaction(e *Event) (r compactionRange, ok bool) {
	if !hasCompaction(e) {
		return r, false
	}
	var c struct {
		StartTimestamp   json.RawMessage `json:"startTimestamp"`
		EndTimestamp     json.RawMessage `json:"endTimestamp"`
		CompactedContent json.RawMessage `json:"compactedContent"`
		StartSnake       json.RawMessage `json:"start_timestamp"`
		EndSnake         json.RawMessage `json:"end_timestamp"`
		ContentSnake     json.RawMessage `json:"compacted_content"`
	}
	if json.Unmarshal(e.Actions.Compaction, &c) != nil {
		return r, false
	}
	start, end, content := or(c.StartTimestamp, c.StartSnake), or(c.EndTimestamp, c.EndSnake), or(c.CompactedContent, c.ContentSnake)
	if isNull(start) || isNull(end) || isNull(content) {
		return r, false
	}
	s, err1 := parseEpoch(start)
	t, err2 := parseEpoch(end)
	if err1 != nil || err2 != nil {
		return r, false
	}
	return compactionRange{start: micros(s), end: micros(t), content: content}, true
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func or(a, b json.RawMessage) json.RawMessage {
	if len(a) > 0 {
		return a
	}
	return b
}

func isNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || bytes.Equal(v, []byte("null"))
}

// isJSCompacted reports whether e is ADK JS's CompactedEvent
// (isCompacted === true).
func isJSCompacted(e *Event) bool {
	return bytes.Equal(bytes.TrimSpace(e.Extra["isCompacted"]), []byte("true"))
}

// isolationScope is e's isolationScope; ok is false when it has none (ADK's
// None).
func isolationScope(e *Event) (string, bool) {
	v := e.Extra["isolationScope"]
	if isNull(v) {
		return "", false
	}
	// scope escapes to json.Unmarshal: declared here, it is allocated only
	// for an event that has a scope, not on every call.
	var scope string
	if json.Unmarshal(v, &scope) != nil {
		return "", false
	}
	return scope, true
}

// The function names of the calls whose events ADK's filter always drops.
var droppedCallNames = map[string]bool{
	"adk_framework": true, "adk_request_credential": true, "adk_request_confirmation": true,
}

// droppedByContent reports whether ADK's filter drops e for every agent:
// its content calls or answers a framework, credential or confirmation
// function.
func droppedByContent(e *Event) bool {
	for _, p := range contentParts(e.Content) {
		if c := p.FunctionCall; c != nil && droppedCallNames[c.Name] {
			return true
		}
		if r := p.FunctionResponse; r != nil && droppedCallNames[r.Name] {
			return true
		}
	}
	return false
}

// contentPart is what the view reads of a genai Part.
type contentPart struct {
	FunctionCall     *functionRef `json:"functionCall"`
	FunctionResponse *functionRef `json:"functionResponse"`
}

type functionRef struct {
	ID   string                     `json:"id"`
	Name string                     `json:"name"`
	Args map[string]json.RawMessage `json:"args"`
}

// contentParts reads the function calls and responses of the parts of a
// Content in API form; nil when there are none or it does not read. A
// content that cannot name either is not parsed (mayNameCalls): the common
// one, text only, costs a scan instead of encoding/json's decode.
func contentParts(content json.RawMessage) []contentPart {
	if isNull(content) || !mayNameCalls(content) {
		return nil
	}
	var c struct {
		Parts []contentPart `json:"parts"`
	}
	if json.Unmarshal(content, &c) != nil {
		return nil
	}
	return c.Parts
}

// mayNameCalls tells whether content may hold a key encoding/json matches to
// "functionCall" or "functionResponse": those keys hold "unct", which it
// matches ASCII case-insensitively (no other rune folds to u, n, c or t), so
// a content without that, and without a \u escape that could spell it, holds
// neither.
//
// It looks for the c (IndexByte; c and u are the rarest of the four in prose)
// and checks the letters around it: several times faster on text than a
// check of every byte, and it runs on every event of a view.
func mayNameCalls(content []byte) bool {
	if len(content) < 4 {
		return false
	}
	if bytes.Contains(content[:len(content)-2], []byte(`\u`)) {
		return true
	}
	for _, c := range [2]byte{'c', 'C'} {
		for from := 2; from < len(content)-1; {
			j := bytes.IndexByte(content[from:len(content)-1], c)
			if j < 0 {
				break
			}
			at := from + j
			if content[at-2]|0x20 == 'u' && content[at-1]|0x20 == 'n' && content[at+1]|0x20 == 't' {
				return true
			}
			from = at + 1
		}
	}
	return false
}
