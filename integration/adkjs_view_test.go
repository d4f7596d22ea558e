package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

var adkJSHistories = flag.Int("adkjs.histories", 200,
	"random histories (seeds 1 to N) in TestADKJSCompactedViewProperty (CI: the default)")

// eventDataRows are events as adksession writes their events.event_data
// column: the flusher's storage form (eventjson.StorageEvent of the API
// form Redis holds) with the columns' id, invocation id and timestamp
// (eventjson.WithColumns, the timestamp in epoch milliseconds).
func eventDataRows(t *testing.T, events []*service.Event) []string {
	t.Helper()
	rows := make([]string, len(events))
	for i, e := range events {
		api, err := json.Marshal(e)
		require.NoError(t, err)
		_, _, data, err := eventjson.StorageEvent(api)
		require.NoError(t, err)
		data, err = eventjson.WithColumns(data, e.ID, e.InvocationID, e.Timestamp)
		require.NoError(t, err)
		rows[i] = string(data)
	}
	return rows
}

// jsEvents are events as testenv.ADKJSActive reads them.
func jsEvents(events []*service.Event) []testenv.JSEvent {
	out := make([]testenv.JSEvent, len(events))
	for i, e := range events {
		out[i] = testenv.JSEvent{ID: e.ID, Micros: e.Timestamp.UnixMicro(), IsCompacted: e.Extra["isCompacted"], EndTime: e.Extra["endTime"]}
	}
	return out
}

// TestADKJSCompactedViewProperty: for random histories in ADK JS's form
// (testenv.HistoryGen, the histories of service's TestCompactedViewProperty:
// seeds 1 to -adkjs.histories), ADK JS 2.0.0's own getActiveEvents, on the
// events as ADK JS reads adksession's rows, keeps the same events, field for
// field (the compacted events' content too), of the compacted view
// (service.CompactedView) as of the whole history; and testenv.ADKJSActive,
// the transliteration service's property test judges the view with, gives
// the same ids as ADK JS on both. The check can fail: each view without its
// last event ADK JS keeps must give ADK JS's getActiveEvents another answer.
// All histories run in one node process.
func TestADKJSCompactedViewProperty(t *testing.T) {
	t.Parallel()
	dir := adkJSDir(t)
	n := *adkJSHistories
	histories := make([][]*service.Event, n)
	cases := make([]map[string][]string, n)
	var events, kept int
	for i := range n {
		var h []*service.Event
		require.NoError(t, json.Unmarshal(testenv.NewHistoryGen(int64(i+1), true).History(), &h))
		view := service.CompactedView(h)
		histories[i] = h
		events += len(h)
		kept += len(view)
		// The view without the last event ADK JS keeps of it (the
		// transliteration's choice, checked against ADK JS's below).
		active := testenv.ADKJSActive(jsEvents(view))
		last := active[len(active)-1]
		without := slices.DeleteFunc(slices.Clone(view), func(e *service.Event) bool { return e.ID == last })
		rows := eventDataRows(t, h)
		row := make(map[*service.Event]string, len(h))
		for j, e := range h {
			row[e] = rows[j]
		}
		rowsOf := func(events []*service.Event) []string {
			out := make([]string, len(events))
			for j, e := range events {
				out[j] = row[e]
			}
			return out
		}
		cases[i] = map[string][]string{"history": rows, "view": rowsOf(view), "without": rowsOf(without)}
	}
	b, err := json.Marshal(cases)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "cases.json")
	require.NoError(t, os.WriteFile(file, b, 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "active.mjs", file)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node active.mjs: %s", stderr.String())
	var got []map[string][]map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	require.Len(t, got, n)

	var compacting, active int
	for i, g := range got {
		seed := i + 1
		h := histories[i]
		want := eventIDs(g["history"])
		require.Equal(t, want, eventIDs(g["view"]), "seed %d: ADK JS's getActiveEvents on the view and on the history", seed)
		require.Equal(t, g["history"], g["view"], "seed %d: the active events as ADK JS reads them", seed)
		require.Equal(t, want, testenv.ADKJSActive(jsEvents(h)), "seed %d: testenv.ADKJSActive and ADK JS's getActiveEvents on the history", seed)
		require.Equal(t, want, testenv.ADKJSActive(jsEvents(service.CompactedView(h))), "seed %d: testenv.ADKJSActive and ADK JS's on the view", seed)
		require.NotEqual(t, want, eventIDs(g["without"]), "seed %d: ADK JS's getActiveEvents on the view without %s", seed, want[len(want)-1])
		if len(want) < len(h) {
			compacting++
			first := g["history"][0]
			require.Equal(t, true, first["isCompacted"], "seed %d: ADK JS reads the compacted event from adksession's row", seed)
			require.Equal(t, "summary", first["compactedContent"], "seed %d", seed)
			require.IsType(t, float64(0), first["endTime"], "seed %d", seed)
		}
		active += len(want)
	}
	t.Logf("%d histories, %d events, %d compacted (ADK JS keeps fewer events than the history); the view keeps %d events, ADK JS's getActiveEvents %d",
		n, events, compacting, kept, active)
	require.Greater(t, compacting, n/2, "the histories compact, as ADK JS sees them")
	require.Less(t, kept, events, "the view drops events")
}
