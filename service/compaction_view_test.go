package service

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var compactionHistories = flag.Int("compaction.histories", 150,
	"random histories per form in TestCompactedViewProperty (CI: the default, a few seconds)")

// historyGen writes random histories as ADK's runners and compactors do:
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
type historyGen struct {
	r      *rand.Rand
	js     bool
	events []*Event
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

func newHistoryGen(seed int64, js bool) *historyGen {
	r := rand.New(rand.NewSource(seed))
	g := &historyGen{r: r, js: js, us: 1_700_000_000_000_000, interval: 1 + r.Intn(3), overlap: r.Intn(3), retention: r.Intn(5)}
	if js && g.retention == 0 {
		g.retention = 1 // ADK JS's calculateRetainStartIndex reads past the end with 0
	}
	return g
}

func (g *historyGen) id(prefix string) string {
	g.n++
	return prefix + strconv.Itoa(g.n)
}

func (g *historyGen) add(e *Event) *Event {
	step := int64(1 + g.r.Intn(3000))
	if g.js {
		step *= 1000
	}
	g.us += step
	e.ID = g.id("e")
	e.Timestamp = time.UnixMicro(g.us).UTC()
	g.events = append(g.events, e)
	return e
}

func content(role string, parts ...string) json.RawMessage {
	return json.RawMessage(`{"role":"` + role + `","parts":[` + joinComma(parts) + `]}`)
}

func joinComma(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ","
		}
		out += p
	}
	return out
}

func textPart(s string) string    { return `{"text":"` + s + `"}` }
func thoughtPart(s string) string { return `{"text":"` + s + `","thought":true}` }
func callPart(id, name string, args bool) string {
	a := `{}`
	if args {
		a = `{"task":"` + id + `"}`
	}
	return `{"functionCall":{"id":"` + id + `","name":"` + name + `","args":` + a + `}}`
}
func responsePart(id, name, result string) string {
	return `{"functionResponse":{"id":"` + id + `","name":"` + name + `","response":{"result":"` + result + `"}}}`
}

func withScope(e *Event, scope string) *Event {
	if scope != "" {
		e.Extra = map[string]json.RawMessage{"isolationScope": json.RawMessage(strconv.Quote(scope))}
	}
	return e
}

// invocation appends one invocation's events.
func (g *historyGen) invocation() {
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
	ev := func(author string, c json.RawMessage) *Event {
		e := &Event{InvocationID: inv, Author: author, Content: c}
		if author != "user" {
			e.Branch = branch
		}
		return g.add(withScope(e, scope))
	}
	ev("user", content("user", textPart("question "+inv)))
	for steps := g.r.Intn(4); steps >= 0; steps-- {
		switch k := g.r.Intn(12); {
		case k < 3:
			ev(agent, content("model", textPart("answer")))
		case k < 4:
			ev(agent, content("model", thoughtPart("thinking")))
		case k < 7: // calls, answered together or one by one
			n := 1 + g.r.Intn(3)
			var calls, ids []string
			for range n {
				id := g.id("fc")
				ids = append(ids, id)
				calls = append(calls, callPart(id, "tool", false))
			}
			ev(agent, content("model", calls...))
			if g.r.Intn(2) == 0 {
				var rs []string
				for _, id := range ids {
					rs = append(rs, responsePart(id, "tool", "ok"))
				}
				ev(agent, content("user", rs...))
			} else {
				for _, id := range ids {
					ev(agent, content("user", responsePart(id, "tool", "ok")))
				}
			}
		case k < 8: // long-running: a placeholder now, the result later
			id := g.id("lr")
			e := ev(agent, content("model", callPart(id, "long", false), callPart(g.id("fc"), "tool", false)))
			e.LongRunningToolIDs = []string{id}
			var rs []string
			for _, p := range contentParts(e.Content) {
				rs = append(rs, responsePart(p.FunctionCall.ID, p.FunctionCall.Name, "pending"))
			}
			ev(agent, content("user", rs...))
			g.longRunning = append(g.longRunning, id)
		case k < 9 && len(g.longRunning) > 0:
			i := g.r.Intn(len(g.longRunning))
			ev(agent, content("user", responsePart(g.longRunning[i], "long", "done")))
			g.longRunning = slices.Delete(g.longRunning, i, i+1)
		case k < 10 && scope == "" && branch == "": // delegate a task
			id := g.id("task")
			ev(agent, content("model", callPart(id, "task_agent", true)))
			g.tasks = append(g.tasks, id)
		case k < 11 && scope == "" && len(g.tasks) > 0: // a task ends
			i := g.r.Intn(len(g.tasks))
			ev(agent, content("user", responsePart(g.tasks[i], "task_agent", "done")))
			g.tasks = slices.Delete(g.tasks, i, i+1)
		default:
			switch g.r.Intn(3) {
			case 0:
				e := ev(agent, nil)
				e.Actions.StateDelta = map[string]any{"k": 1}
			case 1:
				cid := g.id("conf")
				ev(agent, content("model", callPart(cid, "adk_request_confirmation", false)))
				ev("user", content("user", responsePart(cid, "adk_request_confirmation", "yes")))
			default:
				ev(agent, content("model", textPart("more")))
			}
		}
	}
}

// rewind appends a rewind to an earlier invocation (sometimes an unknown one).
func (g *historyGen) rewind() {
	target := "unknown"
	if len(g.invs) > 0 && g.r.Intn(6) > 0 {
		target = g.invs[len(g.invs)-1-g.r.Intn(min(len(g.invs), 4))]
	}
	inv := g.id("e-")
	g.invs = append(g.invs, inv)
	g.add(&Event{InvocationID: inv, Author: "user", Actions: EventActions{RewindBeforeInvocationID: target}})
}

func (g *historyGen) visible() []*Event {
	var out []*Event
	for _, p := range pyApplyRewinds(readPyEvents(g.events)) {
		out = append(out, p.src)
	}
	return out
}

// selfContainedPrefix is compaction.py's _longest_self_contained_prefix.
func selfContainedPrefix(events []*Event) []*Event {
	open := map[string]bool{}
	n := 0
	for i, e := range events {
		for _, p := range contentParts(e.Content) {
			if p.FunctionResponse != nil {
				delete(open, p.FunctionResponse.ID)
			}
		}
		for _, p := range contentParts(e.Content) {
			if p.FunctionCall != nil {
				open[p.FunctionCall.ID] = true
			}
		}
		if len(open) == 0 {
			n = i + 1
		}
	}
	return events[:n]
}

func (g *historyGen) pythonCompaction(start, end int64) {
	e := &Event{InvocationID: g.id("cinv"), Author: "user", Actions: EventActions{Compaction: json.RawMessage(fmt.Sprintf(
		`{"startTimestamp":%s,"endTimestamp":%s,"compactedContent":{"role":"model","parts":[{"text":"summary"}]}}`,
		appendEpochSeconds(nil, time.UnixMicro(start)), appendEpochSeconds(nil, time.UnixMicro(end))))}}
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
	g.add(e)
}

// slidingWindow is _run_compaction_for_sliding_window's choice of events.
func (g *historyGen) slidingWindow() {
	events := g.visible()
	var lastEnd int64
	for i := len(events) - 1; i >= 0; i-- {
		if r, ok := pythonCompaction(events[i]); ok {
			lastEnd = r.end
			break
		}
	}
	latest := map[string]int64{}
	var order []string
	for _, e := range events {
		if e.InvocationID != "" && !hasCompaction(e) {
			if _, ok := latest[e.InvocationID]; !ok {
				order = append(order, e.InvocationID)
			}
			latest[e.InvocationID] = max(latest[e.InvocationID], e.Timestamp.UnixMicro())
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
	first := slices.IndexFunc(events, func(e *Event) bool { return e.InvocationID == startInv })
	last := len(events) - 1
	for events[last].InvocationID != endInv {
		last--
	}
	var window []*Event
	for _, e := range events[first : last+1] {
		if !hasCompaction(e) {
			window = append(window, e)
		}
	}
	if window = selfContainedPrefix(window); len(window) > 0 {
		g.pythonCompaction(window[0].Timestamp.UnixMicro(), window[len(window)-1].Timestamp.UnixMicro())
	}
}

// tokenThreshold is _events_to_compact_for_token_threshold's choice, as if
// the prompt were over the threshold.
func (g *historyGen) tokenThreshold() {
	events := g.visible()
	var ranges []compactionRange
	for i, e := range events {
		if r, ok := pythonCompaction(e); ok {
			r.seq = i
			ranges = append(ranges, r)
		}
	}
	var latest *compactionRange
	for _, r := range frontier(ranges) { // the latest non-subsumed one by stream order
		if latest == nil || r.seq > latest.seq {
			latest = &r
		}
	}
	var lastEnd int64
	if latest != nil {
		lastEnd = latest.end
	}
	var candidates []*Event
	for _, e := range events {
		if !hasCompaction(e) && e.Timestamp.UnixMicro() > lastEnd {
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
			for _, p := range contentParts(candidates[i].Content) {
				if p.FunctionResponse != nil {
					unmatched[p.FunctionResponse.ID] = true
				}
			}
			for _, p := range contentParts(candidates[i].Content) {
				if p.FunctionCall != nil {
					delete(unmatched, p.FunctionCall.ID)
				}
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
	start := toCompact[0].Timestamp.UnixMicro()
	if latest != nil {
		start = latest.start
	}
	g.pythonCompaction(start, toCompact[len(toCompact)-1].Timestamp.UnixMicro())
}

// jsCompaction is ADK JS's TokenBasedContextCompactor.compact with
// LlmSummarizer, as if over the threshold.
func (g *historyGen) jsCompaction() {
	var active []*Event
	for _, e := range g.events {
		if isJSCompacted(e) {
			active = []*Event{e}
		}
	}
	if len(active) == 0 {
		active = slices.Clone(g.events)
	} else {
		end := jsMillis(active[0].Extra["endTime"])
		for _, e := range g.events {
			if !isJSCompacted(e) && e.Timestamp.UnixMicro()/1000 > end {
				active = append(active, e)
			}
		}
	}
	var raw []*Event
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
		toSummarize = append([]*Event{active[0]}, toSummarize...)
	}
	startTime, endTime := toSummarize[0].Timestamp.UnixMicro()/1000, raw[retain-1].Timestamp.UnixMicro()/1000
	g.add(&Event{InvocationID: g.id("cinv"), Author: "system", Content: content("model", textPart("summary")),
		Extra: map[string]json.RawMessage{
			"isCompacted": json.RawMessage("true"), "compactedContent": json.RawMessage(`"summary"`),
			"startTime": json.RawMessage(strconv.FormatInt(startTime, 10)), "endTime": json.RawMessage(strconv.FormatInt(endTime, 10)),
		}})
}

func jsMillis(v json.RawMessage) int64 {
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}

func callIDsOf(e *Event) (ids []string) {
	for _, p := range contentParts(e.Content) {
		if p.FunctionCall != nil {
			ids = append(ids, p.FunctionCall.ID)
		}
	}
	return ids
}

func responseIDsOf(e *Event) (ids []string) {
	for _, p := range contentParts(e.Content) {
		if p.FunctionResponse != nil {
			ids = append(ids, p.FunctionResponse.ID)
		}
	}
	return ids
}

// history writes a random history of invocations, rewinds and compactions.
func (g *historyGen) history() []*Event {
	for n := 3 + g.r.Intn(25); n > 0; n-- {
		if g.r.Intn(9) == 0 {
			g.rewind()
		} else {
			g.invocation()
		}
		if g.r.Intn(3) == 0 {
			switch {
			case g.js:
				g.jsCompaction()
			case g.r.Intn(2) == 0:
				g.slidingWindow()
			default:
				g.tokenThreshold()
			}
		}
	}
	return g.events
}

// pyFilters are the filters an agent may read a history with: every
// branch of it (and a descendant), every isolation scope it carries, with
// and without other agents' thoughts (for each agent name: the name counts
// only there).
func pyFilters(events []*Event) []pyFilter {
	branches := []string{"", "root.subA.deep"}
	scopes := []*string{nil}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Branch != "" && !seen["b"+e.Branch] {
			seen["b"+e.Branch] = true
			branches = append(branches, e.Branch)
		}
		if s, ok := isolationScope(e); ok && !seen["s"+s] {
			seen["s"+s] = true
			scopes = append(scopes, &s)
		}
	}
	var out []pyFilter
	for _, b := range branches {
		for _, s := range scopes {
			out = append(out, pyFilter{Branch: b, Scope: s})
			for _, a := range []string{"root", "subA", "task"} {
				out = append(out, pyFilter{Branch: b, Scope: s, AgentName: a, IncludeThoughts: true})
			}
		}
	}
	return out
}

// checkPythonView says how the view changes what ADK Python gives the
// model, under the first filter where it does ("" when under none).
// leading counts the filters with a first turn from a call.
func checkPythonView(history, view []*Event, leading *int) string {
	h := readPyEvents(history)
	read := make(map[*Event]*pyEvent, len(h))
	for _, p := range h {
		read[p.src] = p
	}
	v := make([]*pyEvent, len(view))
	for i, e := range view {
		v[i] = read[e]
	}
	for _, f := range pyFilters(history) {
		want, got := pyGetContents(h, f), pyGetContents(v, f)
		if want.Leading != "" {
			*leading++
		}
		if !slices.Equal(want.Events, got.Events) || want.Leading != got.Leading {
			return fmt.Sprintf("filter %s:\n history gives %v (first turn from %q)\n view gives    %v (first turn from %q)",
				f, want.Events, want.Leading, got.Events, got.Leading)
		}
	}
	return ""
}

// checkJSView is checkPythonView for ADK JS's getActiveEvents.
func checkJSView(history, view []*Event) string {
	if want, got := adkJSActive(history), adkJSActive(view); !slices.Equal(want, got) {
		return fmt.Sprintf("history gives %v\n view gives    %v", want, got)
	}
	return ""
}

func describe(events []*Event) string {
	out := ""
	for _, e := range events {
		b, _ := json.Marshal(e)
		out += string(b) + "\n"
	}
	return out
}

// TestCompactedViewProperty: for random histories of each form, ADK gives
// the model the same input from CompactedView's events as from the whole
// history, under every filter (ADK Python) or at all (ADK JS).
func TestCompactedViewProperty(t *testing.T) {
	for _, js := range []bool{false, true} {
		form := map[bool]string{false: "python", true: "js"}[js]
		t.Run(form, func(t *testing.T) {
			var events, compactions, kept, filters, rewinds, leading int
			oracleStats.recovered = 0
			for seed := int64(1); seed <= int64(*compactionHistories); seed++ {
				h := newHistoryGen(seed, js).history()
				view := CompactedView(h)
				var problem string
				if js {
					problem = checkJSView(h, view)
				} else {
					problem = checkPythonView(h, view, &leading)
					filters += len(pyFilters(h))
				}
				if problem != "" {
					t.Fatalf("seed %d (%s): %s\nhistory:\n%s", seed, form, problem, describe(h))
				}
				events += len(h)
				kept += len(view)
				for _, e := range h {
					if hasCompaction(e) || isJSCompacted(e) {
						compactions++
					}
					if e.Actions.RewindBeforeInvocationID != "" {
						rewinds++
					}
				}

			}
			t.Logf("%s: %d histories, %d events, %d compactions, %d rewinds; the view keeps %d events (%.0f%%)",
				form, *compactionHistories, events, compactions, rewinds, kept, 100*float64(kept)/float64(events))
			if !js {
				t.Logf("python: %d filter checks, %d of them with calls recovered, %d with a first turn from a call",
					filters, oracleStats.recovered/2, leading)
			}
			require.Greater(t, compactions, *compactionHistories/2, "the generator compacts")
			require.Less(t, kept, events, "the view drops events")
		})
	}
}

// TestCompactedViewCheckerCatches: the property's checker fails a view
// that lacks an event ADK needs: the call of a long-running tool that a
// compaction covers while its real answer comes after (ADK Python puts the
// call back before the answer), and an event after the last compacted
// event's endTime (ADK JS).
func TestCompactedViewCheckerCatches(t *testing.T) {
	g := newHistoryGen(1, false)
	u1 := g.add(&Event{InvocationID: "i1", Author: "user", Content: content("user", textPart("hi"))})
	call := g.add(&Event{InvocationID: "i1", Author: "root", Content: content("model", callPart("lr1", "long", false))})
	g.add(&Event{InvocationID: "i1", Author: "root", Content: content("user", responsePart("lr1", "long", "pending"))})
	m1 := g.add(&Event{InvocationID: "i1", Author: "root", Content: content("model", textPart("waiting"))})
	g.pythonCompaction(u1.Timestamp.UnixMicro(), m1.Timestamp.UnixMicro())
	summary := g.events[len(g.events)-1]
	u2 := g.add(&Event{InvocationID: "i2", Author: "user", Content: content("user", textPart("and?"))})
	done := g.add(&Event{InvocationID: "i2", Author: "root", Content: content("user", responsePart("lr1", "long", "done"))})
	h := g.events

	require.Equal(t, []eventRef{{ID: summary.ID, Summary: true}, {ID: u2.ID}, {ID: call.ID}, {ID: done.ID}},
		adkPythonContents(h, pyFilter{}).Events, "ADK puts the compacted call back before its answer")
	view := CompactedView(h)
	require.Contains(t, view, call)
	require.NotContains(t, view, u1)
	var leading int
	require.Empty(t, checkPythonView(h, view, &leading))
	without := slices.DeleteFunc(slices.Clone(view), func(e *Event) bool { return e == call })
	require.Contains(t, checkPythonView(h, without, &leading), "history gives")

	g = newHistoryGen(1, true)
	for range 4 {
		g.invocation()
	}
	g.jsCompaction()
	g.invocation()
	h = g.events
	view = CompactedView(h)
	require.Empty(t, checkJSView(h, view))
	require.Less(t, len(view), len(h))
	require.Contains(t, checkJSView(h, view[:len(view)-1]), "history gives")
}

// TestCompactedViewMutants: removing one event from the view of random
// histories; the checker must notice for the events ADK needs. It reports
// how many of the view's events are needed as the checker sees it (the rest
// are kept conservatively: for filters no agent of the history uses, for
// scopes and branches, or as extra calls and answers).
func TestCompactedViewMutants(t *testing.T) {
	var mutants, caught int
	var leading int
	for seed := int64(1); seed <= 15; seed++ {
		h := newHistoryGen(seed, false).history()
		view := CompactedView(h)
		for i := range view {
			mutants++
			if checkPythonView(h, slices.Delete(slices.Clone(view), i, i+1), &leading) != "" {
				caught++
			}
		}
	}
	t.Logf("%d of %d one-event removals from the view change what ADK Python gives the model", caught, mutants)
	require.Greater(t, caught, mutants/2)
}
