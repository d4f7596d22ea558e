package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/integration/testenv"
	"github.com/adksession/adksession/service"
	"github.com/adksession/adksession/service/httpapi"
)

// TestGetCompacted: GET ?compacted=true (or 1) answers CompactedView of the
// whole history's events, for a history with ADK Python's compaction events
// and one with ADK JS's, with the full state; compacted=false is the whole
// session. A value other than true, false, 1 or 0, and compacted with
// numRecentEvents or afterTimestamp, is 400 naming the parameters.
func TestGetCompacted(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newAPIServer(t, redisURL, httpapi.Options{})
		for _, h := range testenv.CompactionHistories() {
			t.Run(h.Name, func(t *testing.T) {
				path := base + "/c-" + h.Name
				require.Equal(t, http.StatusOK, s.do(t, "POST", path, nil).code)
				var events []json.RawMessage
				require.NoError(t, json.Unmarshal(h.Events, &events))
				for _, ev := range events {
					r := s.do(t, "POST", path+"/events", []byte(ev))
					require.Equal(t, http.StatusOK, r.code, "%s", r.body)
				}
				get := func(query string) sessionJSON {
					t.Helper()
					r := s.do(t, "GET", path+query, nil)
					require.Equal(t, http.StatusOK, r.code, "%s: %s", query, r.body)
					var sess sessionJSON
					r.json(t, &sess)
					return sess
				}
				whole := get("")
				history := make([]*service.Event, len(whole.Events))
				for i, raw := range whole.Events {
					require.NoError(t, json.Unmarshal(raw, &history[i]))
				}
				view := service.CompactedView(history)
				require.Less(t, len(view), len(history), "the history's view drops events")
				for _, q := range []string{"?compacted=true", "?compacted=1"} {
					got := get(q)
					require.Equal(t, len(view), len(got.Events), "%s: events", q)
					for i, ev := range view {
						b, err := json.Marshal(ev)
						require.NoError(t, err)
						require.JSONEq(t, string(b), string(got.Events[i]), "%s: event %d", q, i)
					}
					require.Equal(t, whole.State, got.State, "%s: the full state", q)
				}
				require.Equal(t, whole.Events, get("?compacted=false").Events)

				for q, names := range map[string][]string{
					"?compacted=yes":                                     {"compacted", "yes"},
					"?compacted=TRUE":                                    {"compacted"},
					"?compacted=true&numRecentEvents=2":                  {"compacted", "numRecentEvents"},
					"?compacted=1&afterTimestamp=1700000003":             {"compacted", "afterTimestamp"},
					"?compacted=true&numRecentEvents=2&afterTimestamp=1": {"numRecentEvents and afterTimestamp"},
				} {
					r := s.do(t, "GET", path+q, nil)
					require.Equal(t, http.StatusBadRequest, r.code, "%s: %s", q, r.body)
					msg := r.errorMessage(t)
					for _, name := range names {
						require.Contains(t, msg, name, q)
					}
				}
			})
		}
	})
}
