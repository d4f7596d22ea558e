package testenv

import (
	"embed"
	"path"
	"strings"
)

//go:embed compaction/*.json
var compactionFS embed.FS

// CompactionHistory is a session history with compaction events, as a JSON
// array of events in ADK's API form, for the tests of the compacted view
// (Get{Compacted: true}) at every layer.
type CompactionHistory struct {
	Name   string // "adk-python", "adk-js"
	Events []byte // the JSON array, in append order
}

// CompactionHistories are two histories whose compacted view drops events:
// ADK Python's form (actions.compaction: a compaction subsumed by a later
// one, a long-running call whose answer comes after the compacted range) and
// ADK JS's top-level form (isCompacted, startTime, endTime, compactedContent:
// two compacted events, the second covering the first). Event ids are unique
// within a history, not across sessions' copies of it.
func CompactionHistories() []CompactionHistory {
	entries, err := compactionFS.ReadDir("compaction")
	if err != nil {
		panic(err)
	}
	var out []CompactionHistory
	for _, e := range entries {
		b, err := compactionFS.ReadFile(path.Join("compaction", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, CompactionHistory{Name: strings.TrimSuffix(e.Name(), ".json"), Events: b})
	}
	return out
}
