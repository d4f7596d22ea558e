package testenv

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
)

// HistoryGen writes random histories as ADK's runners and compactors do,
// for the property tests of the compacted view (service's
// TestCompactedViewProperty against its transliteration of ADK, and
// integration's TestADKJSCompactedViewProperty against ADK JS itself):
// invocations of user text, model text and thoughts, function calls (some
// parallel, some long-running with a placeholder answer and the real one in
// a later invocation), sub-agents on branches, task agents under an
// isolation scope delegated by a function call, framework events, state-only
// events, rewinds to earlier invocations (or unknown ones); and after an
// invocation, a compaction as ADK makes it: ADK Python's sliding window
// (_run_compaction_for_sliding_window) or token threshold
// (_events_to_compact_for_token_threshold, each one seeded with the previous
// summary, so it subsumes it), on the history with rewinds applied and cut to
// its longest self-contained prefix; or ADK JS's TokenBasedContextCompactor.
// Time order is append order, as AppendEvent makes it (JS: milliseconds).
//
// It reads its own events (it imports nothing of adksession, whose tests
// use it): JSON gives them in ADK's API form, for the tests to read as
// service.Events.
type HistoryGen struct {
	r      *rand.Rand
	js     bool
	Events []*HistoryEvent
	us     int64
	n      int
	invs   []string
	// Open calls: a long-running call waiting for its real answer, a task
	// waiting for its end.
	longRunning []string
	tasks       []string
	interval    int
	overlap     int
	retention   int
}

// HistoryEvent is an event of a HistoryGen history: the fields of ADK's
// Event the generator writes.
type HistoryEvent struct {
	ID, InvocationID, Author, Branch string
	Micros                           int64           // the timestamp, epoch microseconds
	Content                          json.RawMessage // genai Content, API form
	LongRunningToolIDs               []string
	StateDelta                       map[string]any
	RewindBeforeInvocationID         string
	Compaction                       json.RawMessage            // ADK Python's actions.compaction
	Extra                            map[string]json.RawMessage // top-level fields: isolationScope, ADK JS's CompactedEvent
	// ADK Python's compaction range (microseconds), when Compaction is set.
	start, end int64
}

// NewHistoryGen returns the generator of seed, writing ADK JS's compactions
// when js is set, ADK Python's otherwise.
func NewHistoryGen(seed int64, js bool) *HistoryGen {
	r := rand.New(rand.NewSource(seed))
	g := &HistoryGen{r: r, js: js, us: 1_700_000_000_000_000, interval: 1 + r.Intn(3), overlap: r.Intn(3), retention: r.Intn(5)}
	if js && g.retention == 0 {
		g.retention = 1 // ADK JS's calculateRetainStartIndex reads past the end with 0
	}
	return g
}

func (g *HistoryGen) id(prefix string) string {
	g.n++
	return prefix + strconv.Itoa(g.n)
}

// Add appends e with the next id and a timestamp after the last event's.
func (g *HistoryGen) Add(e *HistoryEvent) *HistoryEvent {
	step := int64(1 + g.r.Intn(3000))
	if g.js {
		step *= 1000
	}
	g.us += step
	e.ID = g.id("e")
	e.Micros = g.us
	g.Events = append(g.Events, e)
	return e
}

// Content is a genai Content of role with parts (TextPart, ...).
func Content(role string, parts ...string) json.RawMessage {
	return json.RawMessage(`{"role":"` + role + `","parts":[` + strings.Join(parts, ",") + `]}`)
}

// TextPart, ThoughtPart, CallPart and ResponsePart are genai Parts for
// Content.
func TextPart(s string) string    { return `{"text":"` + s + `"}` }
func ThoughtPart(s string) string { return `{"text":"` + s + `","thought":true}` }
func CallPart(id, name string, args bool) string {
	a := `{}`
	if args {
		a = `{"task":"` + id + `"}`
	}
	return `{"functionCall":{"id":"` + id + `","name":"` + name + `","args":` + a + `}}`
}
func ResponsePart(id, name, result string) string {
	return `{"functionResponse":{"id":"` + id + `","name":"` + name + `","response":{"result":"` + result + `"}}}`
}

func withScope(e *HistoryEvent, scope string) *HistoryEvent {
	if scope != "" {
		e.Extra = map[string]json.RawMessage{"isolationScope": json.RawMessage(strconv.Quote(scope))}
	}
	return e
}

// Invocation appends one invocation's events.
func (g *HistoryGen) Invocation() {
	inv := g.id("inv")
	g.invs = append(g.invs, inv)
	agent, branch, scope := "root", "", ""
	switch k := g.r.Intn(10); {
	case k < 2:
		agent, branch = "subA", "root.subA"
	case k < 3:
		agent, branch = "subB", "root.subB"
	case k < 4 && len(g.tasks) > 0:
		agent, scope = "task", g.tasks[g.r.Intn(len(g.tasks))]
	}
	ev := func(author string, c json.RawMessage) *HistoryEvent {
		e := &HistoryEvent{InvocationID: inv, Author: author, Content: c}
		if author != "user" {
			e.Branch = branch
		}
		return g.Add(withScope(e, scope))
	}
	ev("user", Content("user", TextPart("question "+inv)))
	for steps := g.r.Intn(4); steps >= 0; steps-- {
		switch k := g.r.Intn(12); {
		case k < 3:
			ev(agent, Content("model", TextPart("answer")))
		case k < 4:
			ev(agent, Content("model", ThoughtPart("thinking")))
		case k < 7: // calls, answered together or one by one
			n := 1 + g.r.Intn(3)
			var calls, ids []string
			for range n {
				id := g.id("fc")
				ids = append(ids, id)
				calls = append(calls, CallPart(id, "tool", false))
			}
			ev(agent, Content("model", calls...))
			if g.r.Intn(2) == 0 {
				var rs []string
				for _, id := range ids {
					rs = append(rs, ResponsePart(id, "tool", "ok"))
				}
				ev(agent, Content("user", rs...))
			} else {
				for _, id := range ids {
					ev(agent, Content("user", ResponsePart(id, "tool", "ok")))
				}
			}
		case k < 8: // long-running: a placeholder now, the result later
			id := g.id("lr")
			e := ev(agent, Content("model", CallPart(id, "long", false), CallPart(g.id("fc"), "tool", false)))
			e.LongRunningToolIDs = []string{id}
			var rs []string
			for _, p := range parts(e.Content) {
				rs = append(rs, ResponsePart(p.FunctionCall.ID, p.FunctionCall.Name, "pending"))
			}
			ev(agent, Content("user", rs...))
			g.longRunning = append(g.longRunning, id)
		case k < 9 && len(g.longRunning) > 0:
			i := g.r.Intn(len(g.longRunning))
			ev(agent, Content("user", ResponsePart(g.longRunning[i], "long", "done")))
			g.longRunning = slices.Delete(g.longRunning, i, i+1)
		case k < 10 && scope == "" && branch == "": // delegate a task
			id := g.id("task")
			ev(agent, Content("model", CallPart(id, "task_agent", true)))
			g.tasks = append(g.tasks, id)
		case k < 11 && scope == "" && len(g.tasks) > 0: // a task ends
			i := g.r.Intn(len(g.tasks))
			ev(agent, Content("user", ResponsePart(g.tasks[i], "task_agent", "done")))
			g.tasks = slices.Delete(g.tasks, i, i+1)
		default:
			switch g.r.Intn(3) {
			case 0:
				e := ev(agent, nil)
				e.StateDelta = map[string]any{"k": 1}
			case 1:
				cid := g.id("conf")
				ev(agent, Content("model", CallPart(cid, "adk_request_confirmation", false)))
				ev("user", Content("user", ResponsePart(cid, "adk_request_confirmation", "yes")))
			default:
				ev(agent, Content("model", TextPart("more")))
			}
		}
	}
}

// rewind appends a rewind to an earlier invocation (sometimes an unknown one).
func (g *HistoryGen) rewind() {
	target := "unknown"
	if len(g.invs) > 0 && g.r.Intn(6) > 0 {
		target = g.invs[len(g.invs)-1-g.r.Intn(min(len(g.invs), 4))]
	}
	inv := g.id("e-")
	g.invs = append(g.invs, inv)
	g.Add(&HistoryEvent{InvocationID: inv, Author: "user", RewindBeforeInvocationID: target})
}

// visible is the history with its rewinds applied, as ADK Python's
// _apply_rewinds does it.
func (g *HistoryGen) visible() []*HistoryEvent {
	var kept []*HistoryEvent
	for i := len(g.Events) - 1; i >= 0; i-- {
		e := g.Events[i]
		if e.RewindBeforeInvocationID == "" {
			kept = append(kept, e)
			continue
		}
		for j := 0; j < i; j++ {
			if g.Events[j].InvocationID == e.RewindBeforeInvocationID {
				i = j
				break
			}
		}
	}
	slices.Reverse(kept)
	return kept
}

// part is what the generator reads of a genai Part.
type part struct {
	FunctionCall, FunctionResponse *struct{ ID, Name string }
}

func parts(content json.RawMessage) []part {
	var c struct{ Parts []part }
	if len(content) > 0 {
		if err := json.Unmarshal(content, &c); err != nil {
			panic("testenv: content does not read: " + err.Error())
		}
	}
	return c.Parts
}

func callIDsOf(e *HistoryEvent) (ids []string) {
	for _, p := range parts(e.Content) {
		if p.FunctionCall != nil {
			ids = append(ids, p.FunctionCall.ID)
		}
	}
	return ids
}

func responseIDsOf(e *HistoryEvent) (ids []string) {
	for _, p := range parts(e.Content) {
		if p.FunctionResponse != nil {
			ids = append(ids, p.FunctionResponse.ID)
		}
	}
	return ids
}

// selfContainedPrefix is compaction.py's _longest_self_contained_prefix.
func selfContainedPrefix(events []*HistoryEvent) []*HistoryEvent {
	open := map[string]bool{}
	n := 0
	for i, e := range events {
		for _, id := range responseIDsOf(e) {
			delete(open, id)
		}
		for _, id := range callIDsOf(e) {
			open[id] = true
		}
		if len(open) == 0 {
			n = i + 1
		}
	}
	return events[:n]
}

// epochSeconds writes epoch microseconds as float seconds with six
// decimals, as ADK Python's JSON does.
func epochSeconds(us int64) string {
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// PythonCompaction appends ADK Python's compaction event of the range from
// start to end (epoch microseconds).
func (g *HistoryGen) PythonCompaction(start, end int64) {
	e := &HistoryEvent{InvocationID: g.id("cinv"), Author: "user", start: start, end: end, Compaction: json.RawMessage(fmt.Sprintf(
		`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
		epochSeconds(start), epochSeconds(end)))}
	// Not ADK's own, but a store holds any event: compactions with a branch
	// or a scope (they may cover only what the same agents see).
	switch g.r.Intn(25) {
	case 0:
		e.Branch = "root.subA"
	case 1:
		if len(g.tasks) > 0 {
			withScope(e, g.tasks[0])
		}
	}
	g.Add(e)
}

// slidingWindow is _run_compaction_for_sliding_window's choice of events.
func (g *HistoryGen) slidingWindow() {
	events := g.visible()
	var lastEnd int64
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Compaction != nil {
			lastEnd = events[i].end
			break
		}
	}
	latest := map[string]int64{}
	var order []string
	for _, e := range events {
		if e.InvocationID != "" && e.Compaction == nil {
			if _, ok := latest[e.InvocationID]; !ok {
				order = append(order, e.InvocationID)
			}
			latest[e.InvocationID] = max(latest[e.InvocationID], e.Micros)
		}
	}
	var fresh []string
	for _, inv := range order {
		if latest[inv] > lastEnd {
			fresh = append(fresh, inv)
		}
	}
	if len(fresh) < g.interval {
		return
	}
	startInv := order[max(0, slices.Index(order, fresh[0])-g.overlap)]
	endInv := fresh[len(fresh)-1]
	first := slices.IndexFunc(events, func(e *HistoryEvent) bool { return e.InvocationID == startInv })
	last := len(events) - 1
	for events[last].InvocationID != endInv {
		last--
	}
	var window []*HistoryEvent
	for _, e := range events[first : last+1] {
		if e.Compaction == nil {
			window = append(window, e)
		}
	}
	if window = selfContainedPrefix(window); len(window) > 0 {
		g.PythonCompaction(window[0].Micros, window[len(window)-1].Micros)
	}
}

// tokenThreshold is _events_to_compact_for_token_threshold's choice, as if
// the prompt were over the threshold.
func (g *HistoryGen) tokenThreshold() {
	events := g.visible()
	// The latest compaction by stream order that no other subsumes (holds
	// within its range, or has an equal range and comes later).
	var latest *HistoryEvent
	for i, c := range events {
		if c.Compaction == nil {
			continue
		}
		subsumed := false
		for j, o := range events {
			if o.Compaction != nil && j != i && o.start <= c.start && o.end >= c.end && (o.start < c.start || o.end > c.end || j > i) {
				subsumed = true
				break
			}
		}
		if !subsumed {
			latest = c
		}
	}
	var lastEnd int64
	if latest != nil {
		lastEnd = latest.end
	}
	var candidates []*HistoryEvent
	for _, e := range events {
		if e.Compaction == nil && e.Micros > lastEnd {
			candidates = append(candidates, e)
		}
	}
	if len(candidates) <= g.retention {
		return
	}
	toCompact := candidates
	if g.retention > 0 {
		// _safe_token_compaction_split_index
		split, best, unmatched := len(candidates)-g.retention, 0, map[string]bool{}
		for i := len(candidates) - 1; i >= 0; i-- {
			for _, id := range responseIDsOf(candidates[i]) {
				unmatched[id] = true
			}
			for _, id := range callIDsOf(candidates[i]) {
				delete(unmatched, id)
			}
			if len(unmatched) == 0 && i <= split {
				best = i
				break
			}
		}
		toCompact = candidates[:best]
	}
	if toCompact = selfContainedPrefix(toCompact); len(toCompact) == 0 {
		return
	}
	start := toCompact[0].Micros
	if latest != nil {
		start = latest.start
	}
	g.PythonCompaction(start, toCompact[len(toCompact)-1].Micros)
}

func isJSCompacted(e *HistoryEvent) bool { return string(e.Extra["isCompacted"]) == "true" }

// JSCompaction appends what ADK JS's TokenBasedContextCompactor.compact
// with LlmSummarizer appends when over the threshold (if anything).
func (g *HistoryGen) JSCompaction() {
	var active []*HistoryEvent
	for _, e := range g.Events {
		if isJSCompacted(e) {
			active = []*HistoryEvent{e}
		}
	}
	if len(active) == 0 {
		active = slices.Clone(g.Events)
	} else {
		end, _ := strconv.ParseInt(string(active[0].Extra["endTime"]), 10, 64)
		for _, e := range g.Events {
			if !isJSCompacted(e) && e.Micros/1000 > end {
				active = append(active, e)
			}
		}
	}
	var raw []*HistoryEvent
	for _, e := range active {
		if !isJSCompacted(e) {
			raw = append(raw, e)
		}
	}
	if len(raw) <= g.retention {
		return
	}
	retain := max(0, len(raw)-g.retention) // calculateRetainStartIndex
	for retain > 0 && len(responseIDsOf(raw[retain])) > 0 && len(callIDsOf(raw[retain-1])) > 0 {
		retain--
	}
	if retain == 0 {
		return
	}
	toSummarize := raw[:retain]
	if isJSCompacted(active[0]) {
		toSummarize = append([]*HistoryEvent{active[0]}, toSummarize...)
	}
	startTime, endTime := toSummarize[0].Micros/1000, raw[retain-1].Micros/1000
	g.Add(&HistoryEvent{InvocationID: g.id("cinv"), Author: "system", Content: Content("model", TextPart("summary")),
		Extra: map[string]json.RawMessage{
			"isCompacted": json.RawMessage("true"), "compactedContent": json.RawMessage(`"summary"`),
			"startTime": json.RawMessage(strconv.FormatInt(startTime, 10)), "endTime": json.RawMessage(strconv.FormatInt(endTime, 10)),
		}})
}

// History writes a random history of invocations, rewinds and compactions
// and returns JSON of its events.
func (g *HistoryGen) History() []byte {
	for n := 3 + g.r.Intn(25); n > 0; n-- {
		if g.r.Intn(9) == 0 {
			g.rewind()
		} else {
			g.Invocation()
		}
		if g.r.Intn(3) == 0 {
			switch {
			case g.js:
				g.JSCompaction()
			case g.r.Intn(2) == 0:
				g.slidingWindow()
			default:
				g.tokenThreshold()
			}
		}
	}
	return g.JSON()
}

// JSON returns the events as a JSON array in ADK's API form (timestamps in
// float epoch seconds), in append order.
func (g *HistoryGen) JSON() []byte {
	out := make([]map[string]any, len(g.Events))
	for i, e := range g.Events {
		actions := map[string]any{}
		if e.StateDelta != nil {
			actions["stateDelta"] = e.StateDelta
		}
		if e.RewindBeforeInvocationID != "" {
			actions["rewindBeforeInvocationId"] = e.RewindBeforeInvocationID
		}
		if e.Compaction != nil {
			actions["compaction"] = e.Compaction
		}
		m := map[string]any{"id": e.ID, "invocationId": e.InvocationID, "author": e.Author,
			"timestamp": json.RawMessage(epochSeconds(e.Micros)), "actions": actions}
		if e.Branch != "" {
			m["branch"] = e.Branch
		}
		if e.Content != nil {
			m["content"] = e.Content
		}
		if e.LongRunningToolIDs != nil {
			m["longRunningToolIds"] = e.LongRunningToolIDs
		}
		for k, v := range e.Extra {
			m[k] = v
		}
		out[i] = m
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic("testenv: history JSON: " + err.Error())
	}
	return b
}
