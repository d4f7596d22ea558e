package service

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
)

var compactionHistories = flag.Int("compaction.histories", 150,
	"random histories per form in TestCompactedViewProperty (CI: the default, a few seconds)")

// readHistory reads a history testenv.HistoryGen wrote (ADK's API form).
func readHistory(t testing.TB, history []byte) []*Event {
	t.Helper()
	var events []*Event
	require.NoError(t, json.Unmarshal(history, &events))
	return events
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
			oracleStats.recovered.Store(0)
			for seed := int64(1); seed <= int64(*compactionHistories); seed++ {
				h := readHistory(t, testenv.NewHistoryGen(seed, js).History())
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
					filters, oracleStats.recovered.Load()/2, leading)
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
	g := testenv.NewHistoryGen(1, false)
	add := func(inv, author string, c json.RawMessage) int64 {
		return g.Add(&testenv.HistoryEvent{InvocationID: inv, Author: author, Content: c}).Micros
	}
	u1 := add("i1", "user", testenv.Content("user", testenv.TextPart("hi")))
	add("i1", "root", testenv.Content("model", testenv.CallPart("lr1", "long", false)))
	add("i1", "root", testenv.Content("user", testenv.ResponsePart("lr1", "long", "pending")))
	m1 := add("i1", "root", testenv.Content("model", testenv.TextPart("waiting")))
	g.PythonCompaction(u1, m1)
	add("i2", "user", testenv.Content("user", testenv.TextPart("and?")))
	add("i2", "root", testenv.Content("user", testenv.ResponsePart("lr1", "long", "done")))
	h := readHistory(t, g.JSON())
	first, call, summary, u2, done := h[0], h[1], h[4], h[5], h[6]

	require.Equal(t, []eventRef{{ID: summary.ID, Summary: true}, {ID: u2.ID}, {ID: call.ID}, {ID: done.ID}},
		adkPythonContents(h, pyFilter{}).Events, "ADK puts the compacted call back before its answer")
	view := CompactedView(h)
	require.Contains(t, view, call)
	require.NotContains(t, view, first)
	var leading int
	require.Empty(t, checkPythonView(h, view, &leading))
	without := slices.DeleteFunc(slices.Clone(view), func(e *Event) bool { return e == call })
	require.Contains(t, checkPythonView(h, without, &leading), "history gives")

	g = testenv.NewHistoryGen(1, true)
	for range 4 {
		g.Invocation()
	}
	g.JSCompaction()
	g.Invocation()
	h = readHistory(t, g.JSON())
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
		h := readHistory(t, testenv.NewHistoryGen(seed, false).History())
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
