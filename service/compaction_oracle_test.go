package service

import (
	"encoding/json"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/adksession/adksession/integration/testenv"
)

// This file is an oracle of ADK's context building, transliterated from
// ADK's code, to judge CompactedView with (compaction_view_test.go):
//
//   - ADK Python main bb56aa56, src/google/adk/flows/llm_flows/contents.py:
//     _get_contents up to events_to_process (_apply_rewinds from
//     events/_rewind_events.py, _should_include_event_in_context with
//     _contains_empty_content, _is_part_invisible, _is_event_belongs_to_branch
//     and _BranchPath, _is_adk_framework_event, _is_auth_event,
//     _is_request_confirmation_event, then _process_compaction_events and
//     _recover_compacted_function_calls), and the event
//     _build_task_input_user_content takes a scoped agent's first turn from.
//     What _get_contents does after that (transcriptions, other agents'
//     messages, the function-response rearrangements, the content copies) is
//     a function of events_to_process, the agent name and the flags alone, so
//     equal events_to_process give equal contents.
//   - ADK JS 2.0.0, dist/esm/context/compaction_utils.js: getActiveEvents,
//     which ContentRequestProcessor runs on the session's events before
//     getContents (a function of its result, the agent name, branch and
//     scope alone); the transliteration is testenv.ADKJSActive, shared
//     with integration's TestADKJSCompactedViewProperty, which runs ADK
//     JS's own on the same histories and holds the two to each other.
//
// It reads events on its own (pyEvent), sharing only parseEpoch with the
// code under test: ADK Python compares float seconds, the oracle compares
// microseconds (the store's resolution: a float of a microsecond timestamp
// reads back to the same microsecond).

// eventRef is one entry of what the model gets: an event of the history
// (by id), or the summary ADK Python materializes from a compaction event.
type eventRef struct {
	ID      string
	Summary bool
}

func (r eventRef) String() string {
	if r.Summary {
		return "summary(" + r.ID + ")"
	}
	return r.ID
}

// pyFilter is what ADK Python's _get_contents filters by.
type pyFilter struct {
	Branch          string  // the invocation's branch; "" is None
	Scope           *string // the agent's isolation_scope; nil is None
	AgentName       string
	IncludeThoughts bool // run_config.include_thoughts_from_other_agents
}

func (f pyFilter) String() string {
	s := "None"
	if f.Scope != nil {
		s = *f.Scope
	}
	return "branch=" + f.Branch + " scope=" + s + " agent=" + f.AgentName + map[bool]string{true: " thoughts", false: ""}[f.IncludeThoughts]
}

// pyContents is what ADK Python's _get_contents builds the model's input
// from: events_to_process, and the event whose function call gives a scoped
// agent its first turn ("" when none).
type pyContents struct {
	Events  []eventRef
	Leading string
}

// pyEvent is an event as ADK Python's code reads it.
type pyEvent struct {
	ref         eventRef
	src         *Event
	ts          int64 // microseconds
	invocation  string
	author      string
	branch      string
	scope       *string
	content     *pyContent
	rewind      string
	compaction  bool // actions.compaction is set
	cStart      *int64
	cEnd        *int64
	cContent    *pyContent
	transcribed bool // input or output transcription
	live        bool // live_session_id
}

type pyContent struct {
	Role  string   `json:"role"`
	Parts []pyPart `json:"parts"`
}

type pyPart struct {
	Text                *string         `json:"text"`
	Thought             bool            `json:"thought"`
	FunctionCall        *pyFunction     `json:"functionCall"`
	FunctionResponse    *pyFunction     `json:"functionResponse"`
	InlineData          json.RawMessage `json:"inlineData"`
	FileData            json.RawMessage `json:"fileData"`
	ExecutableCode      json.RawMessage `json:"executableCode"`
	CodeExecutionResult json.RawMessage `json:"codeExecutionResult"`
}

type pyFunction struct {
	ID   *string        `json:"id"`
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

func (f *pyFunction) id() string {
	if f.ID == nil {
		return ""
	}
	return *f.ID
}

func readPyContent(raw json.RawMessage) *pyContent {
	if isNullJSON(raw) {
		return nil
	}
	var c pyContent
	if err := json.Unmarshal(raw, &c); err != nil {
		panic("oracle: content does not read: " + err.Error())
	}
	return &c
}

func isNullJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func readPyEvent(e *Event) *pyEvent {
	p := &pyEvent{
		ref: eventRef{ID: e.ID}, src: e, ts: e.Timestamp.UnixMicro(), invocation: e.InvocationID,
		author: e.Author, branch: e.Branch, content: readPyContent(e.Content),
		rewind: e.Actions.RewindBeforeInvocationID,
	}
	if v := e.Extra["isolationScope"]; !isNullJSON(v) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			panic("oracle: isolationScope: " + err.Error())
		}
		p.scope = &s
	}
	p.transcribed = !isNullJSON(e.Extra["inputTranscription"]) || !isNullJSON(e.Extra["outputTranscription"])
	if v := e.Extra["liveSessionId"]; !isNullJSON(v) && string(v) != `""` {
		p.live = true
	}
	if !isNullJSON(e.Actions.Compaction) {
		p.compaction = true
		var c map[string]json.RawMessage
		if err := json.Unmarshal(e.Actions.Compaction, &c); err != nil {
			panic("oracle: compaction: " + err.Error())
		}
		readTime := func(v json.RawMessage) *int64 {
			if isNullJSON(v) {
				return nil
			}
			t, err := parseEpoch(v)
			if err != nil {
				panic("oracle: compaction time: " + err.Error())
			}
			us := t.UnixMicro()
			return &us
		}
		p.cStart, p.cEnd = readTime(c["startTimestamp"]), readTime(c["endTimestamp"])
		p.cContent = readPyContent(c["compactedContent"])
	}
	return p
}

func (e *pyEvent) functionCalls() []*pyFunction {
	var out []*pyFunction
	if e.content != nil {
		for _, p := range e.content.Parts {
			if p.FunctionCall != nil {
				out = append(out, p.FunctionCall)
			}
		}
	}
	return out
}

func (e *pyEvent) functionResponses() []*pyFunction {
	var out []*pyFunction
	if e.content != nil {
		for _, p := range e.content.Parts {
			if p.FunctionResponse != nil {
				out = append(out, p.FunctionResponse)
			}
		}
	}
	return out
}

// pyApplyRewinds is events/_rewind_events.py's _apply_rewinds.
func pyApplyRewinds(events []*pyEvent) []*pyEvent {
	var kept []*pyEvent
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.rewind != "" {
			for j := 0; j < i; j++ {
				if events[j].invocation == e.rewind {
					i = j
					break
				}
			}
		} else {
			kept = append(kept, e)
		}
	}
	for a, b := 0, len(kept)-1; a < b; a, b = a+1, b-1 {
		kept[a], kept[b] = kept[b], kept[a]
	}
	return kept
}

// pyPartInvisible is _is_part_invisible.
func pyPartInvisible(p pyPart, includeThoughts bool) bool {
	if p.FunctionCall != nil || p.FunctionResponse != nil {
		return false
	}
	return (p.Thought && !includeThoughts) || !((p.Text != nil && *p.Text != "") || !isNullJSON(p.InlineData) ||
		!isNullJSON(p.FileData) || !isNullJSON(p.ExecutableCode) || !isNullJSON(p.CodeExecutionResult))
}

// pyContainsEmptyContent is _contains_empty_content.
func pyContainsEmptyContent(e *pyEvent, includeThoughts bool) bool {
	if e.compaction {
		return false
	}
	empty := e.content == nil || e.content.Role == "" || len(e.content.Parts) == 0
	if !empty {
		empty = true
		for _, p := range e.content.Parts {
			if !pyPartInvisible(p, includeThoughts) {
				empty = false
			}
		}
	}
	return empty && !e.transcribed
}

// pyBelongsToBranch is _is_event_belongs_to_branch with _BranchPath.
func pyBelongsToBranch(invocationBranch string, e *pyEvent) bool {
	if invocationBranch == "" || e.branch == "" {
		return true
	}
	inv, evt := strings.Split(invocationBranch, "."), strings.Split(e.branch, ".")
	if len(inv) < len(evt) {
		return false
	}
	for i := range evt {
		if inv[i] != evt[i] {
			return false
		}
	}
	return true // equal, or inv descends from evt
}

// pyIsFunctionCallEvent is _is_function_call_event.
func pyIsFunctionCallEvent(e *pyEvent, name string) bool {
	if e.content == nil {
		return false
	}
	for _, p := range e.content.Parts {
		if p.FunctionCall != nil && p.FunctionCall.Name == name || p.FunctionResponse != nil && p.FunctionResponse.Name == name {
			return true
		}
	}
	return false
}

// pyIsOtherAgentReply is _is_other_agent_reply.
func pyIsOtherAgentReply(agent string, e *pyEvent) bool {
	if e.live {
		return e.author != "user"
	}
	return agent != "" && e.author != agent && e.author != "user"
}

// pyShouldInclude is _should_include_event_in_context.
func pyShouldInclude(f pyFilter, e *pyEvent) bool {
	if (e.scope == nil) != (f.Scope == nil) || e.scope != nil && *e.scope != *f.Scope {
		return false
	}
	include := f.IncludeThoughts && pyIsOtherAgentReply(f.AgentName, e)
	return !(pyContainsEmptyContent(e, include) || !pyBelongsToBranch(f.Branch, e) ||
		pyIsFunctionCallEvent(e, "adk_framework") || pyIsFunctionCallEvent(e, "adk_request_credential") ||
		pyIsFunctionCallEvent(e, "adk_request_confirmation"))
}

// pyProcessCompactionEvents is _process_compaction_events.
func pyProcessCompactionEvents(events []*pyEvent) []*pyEvent {
	type info struct {
		i          int
		start, end int64
	}
	var infos []info
	for i, e := range events {
		if e.compaction && e.cStart != nil && e.cEnd != nil && e.cContent != nil {
			infos = append(infos, info{i, *e.cStart, *e.cEnd})
		}
	}
	subsumed := map[int]bool{}
	for _, c := range infos {
		for _, o := range infos {
			if o.i == c.i {
				continue
			}
			if o.start <= c.start && o.end >= c.end && (o.start < c.start || o.end > c.end || o.i > c.i) {
				subsumed[c.i] = true
				break
			}
		}
	}
	type item struct {
		ts int64
		i  int
		e  *pyEvent
	}
	var ranges [][2]int64
	var items []item
	for i, e := range events {
		if !e.compaction || subsumed[i] || e.cStart == nil || e.cEnd == nil || e.cContent == nil {
			continue
		}
		ranges = append(ranges, [2]int64{*e.cStart, *e.cEnd})
		summary := *e
		summary.ref = eventRef{ID: e.ref.ID, Summary: true}
		summary.ts, summary.author, summary.content = *e.cEnd, "model", e.cContent
		items = append(items, item{*e.cEnd, i, &summary})
	}
	compacted := func(ts int64) bool {
		for _, r := range ranges {
			if r[0] <= ts && ts <= r[1] {
				return true
			}
		}
		return false
	}
	for i, e := range events {
		if e.compaction || compacted(e.ts) {
			continue
		}
		items = append(items, item{e.ts, i, e})
	}
	sort.SliceStable(items, func(a, b int) bool {
		if items[a].ts != items[b].ts {
			return items[a].ts < items[b].ts
		}
		return items[a].i < items[b].i
	})
	out := make([]*pyEvent, len(items))
	for i, it := range items {
		out[i] = it.e
	}
	return out
}

// pyRecoverCompactedFunctionCalls is _recover_compacted_function_calls.
func pyRecoverCompactedFunctionCalls(events, source []*pyEvent) []*pyEvent {
	calls, responses := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		for _, c := range e.functionCalls() {
			if c.id() != "" {
				calls[c.id()] = true
			}
		}
		for _, r := range e.functionResponses() {
			if r.id() != "" {
				responses[r.id()] = true
			}
		}
	}
	orphaned := map[string]bool{}
	for id := range responses {
		if !calls[id] {
			orphaned[id] = true
		}
	}
	if len(orphaned) == 0 {
		return events
	}
	callEvent := map[string]*pyEvent{}
	for _, e := range source {
		for _, c := range e.functionCalls() {
			if c.ID != nil && orphaned[*c.ID] {
				if _, ok := callEvent[*c.ID]; !ok {
					callEvent[*c.ID] = e
				}
			}
		}
	}
	if len(callEvent) == 0 {
		return events
	}
	responseEvent := map[string]*pyEvent{}
	for _, e := range source {
		for _, r := range e.functionResponses() {
			if r.id() == "" {
				continue
			}
			if old, ok := responseEvent[r.id()]; !ok || e.ts >= old.ts {
				responseEvent[r.id()] = e
			}
		}
	}
	var result []*pyEvent
	reinjected := map[string]bool{}
	for _, e := range events {
		for _, r := range e.functionResponses() {
			call, ok := callEvent[r.id()]
			if r.ID == nil || !ok || reinjected[r.id()] {
				continue
			}
			result = append(result, call)
			var siblings []string
			for _, c := range call.functionCalls() {
				if c.id() != "" {
					siblings = append(siblings, c.id())
					reinjected[c.id()] = true
				}
			}
			for _, s := range siblings {
				if !responses[s] {
					if resp, ok := responseEvent[s]; ok {
						result = append(result, resp)
					}
				}
			}
		}
		result = append(result, e)
	}
	return result
}

// pyTaskInputEvent is the event _build_task_input_user_content takes a
// scoped agent's first turn from, out of all the session's events.
func pyTaskInputEvent(events []*pyEvent, scope string) string {
	for _, e := range events {
		if e.content == nil || len(e.content.Parts) == 0 {
			continue
		}
		for _, p := range e.content.Parts {
			if fc := p.FunctionCall; fc != nil && fc.ID != nil && *fc.ID == scope && len(fc.Args) > 0 {
				return e.ref.ID
			}
		}
	}
	return ""
}

// adkPythonContents is what ADK Python's _get_contents gives the model out
// of events, for an agent reading them with filter f.
func adkPythonContents(events []*Event, f pyFilter) pyContents {
	return pyGetContents(readPyEvents(events), f)
}

func readPyEvents(events []*Event) []*pyEvent {
	all := make([]*pyEvent, len(events))
	for i, e := range events {
		all[i] = readPyEvent(e)
	}
	return all
}

// pyGetContents is adkPythonContents of events read once.
func pyGetContents(all []*pyEvent, f pyFilter) pyContents {
	var raw []*pyEvent
	for _, e := range pyApplyRewinds(all) {
		if pyShouldInclude(f, e) {
			raw = append(raw, e)
		}
	}
	process := raw
	for _, e := range raw {
		if e.compaction {
			compacted := pyProcessCompactionEvents(raw)
			process = pyRecoverCompactedFunctionCalls(compacted, raw)
			if len(process) > len(compacted) {
				oracleStats.recovered.Add(1)
			}
			break
		}
	}
	out := pyContents{Events: []eventRef{}}
	for _, e := range process {
		out.Events = append(out.Events, e.ref)
	}
	if f.Scope != nil {
		out.Leading = pyTaskInputEvent(all, *f.Scope)
	}
	return out
}

// oracleStats counts the oracle's runs where
// _recover_compacted_function_calls put events back (a count for the
// property test's log: TestCompactedViewThroughTheStore runs the oracle on
// both backends at once).
var oracleStats struct{ recovered atomic.Int64 }

// adkJSActive is ADK JS 2.0.0's getActiveEvents (testenv.ADKJSActive,
// which integration's TestADKJSCompactedViewProperty holds to ADK JS's own).
func adkJSActive(events []*Event) []eventRef {
	js := make([]testenv.JSEvent, len(events))
	for i, e := range events {
		js[i] = testenv.JSEvent{ID: e.ID, Micros: e.Timestamp.UnixMicro(), IsCompacted: e.Extra["isCompacted"], EndTime: e.Extra["endTime"]}
	}
	out := []eventRef{}
	for _, id := range testenv.ADKJSActive(js) {
		out = append(out, eventRef{ID: id})
	}
	return out
}
