package adkgo

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/adk/v2/session"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
)

// TestCompactedGets: with Config.CompactedGets, a Get with neither
// NumRecentEvents nor After (the runner's) returns the compacted view of a
// history with ADK Python's compaction events and of one with ADK JS's
// (CompactedView of the whole history, fewer events), with the full state;
// a Get with a window is that window; New's Gets are the whole history.
func TestCompactedGets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg service.Config) {
		ctx := t.Context()
		svc := openService(t, cfg)
		plain, compacted := New(svc), NewWithConfig(svc, Config{CompactedGets: true})
		for _, h := range testenv.CompactionHistories() {
			t.Run(h.Name, func(t *testing.T) {
				created, err := svc.Create(ctx, &service.CreateRequest{AppName: "app", UserID: "u", State: map[string]any{"k": 1}})
				require.NoError(t, err)
				var events []*service.Event
				require.NoError(t, json.Unmarshal(h.Events, &events))
				for _, ev := range events {
					require.NoError(t, svc.AppendEvent(ctx, created.Session, ev))
				}
				var want []string
				for _, ev := range service.CompactedView(events) {
					want = append(want, ev.ID)
				}
				require.Less(t, len(want), len(events), "the history's view drops events")

				req := &session.GetRequest{AppName: "app", UserID: "u", SessionID: created.Session.ID()}
				whole, err := plain.Get(ctx, req)
				require.NoError(t, err)
				require.Len(t, eventIDs(whole.Session), len(events), "New: the whole history")
				view, err := compacted.Get(ctx, req)
				require.NoError(t, err)
				require.Equal(t, want, eventIDs(view.Session), "CompactedGets: the compacted view")
				require.Equal(t, stateOf(whole.Session), stateOf(view.Session), "the full state")

				windowed := *req
				windowed.NumRecentEvents = 2
				got, err := compacted.Get(ctx, &windowed)
				require.NoError(t, err)
				require.Equal(t, eventIDs(whole.Session)[len(events)-2:], eventIDs(got.Session), "NumRecentEvents: the window")
				windowed = *req
				windowed.After = events[2].Timestamp
				got, err = compacted.Get(ctx, &windowed)
				require.NoError(t, err)
				require.Equal(t, eventIDs(whole.Session)[2:], eventIDs(got.Session), "After: the window")
			})
		}
	})
}
