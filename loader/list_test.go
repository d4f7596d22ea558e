package loader

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adksession/adksession/cache"
	"github.com/adksession/adksession/cache/base"
	"github.com/adksession/adksession/persist"
)

func TestMergeKeys(t *testing.T) {
	t.Parallel()
	item := func(u, s string) cache.ListItem { return cache.ListItem{User: u, SID: s} }
	row := func(u, s string) persist.SessionSummary {
		return persist.SessionSummary{Key: base.SessionRef{App: "app", User: u, ID: s}}
	}
	for _, tc := range []struct {
		name  string
		redis []cache.ListItem
		db    []persist.SessionSummary
		want  []cache.ListItem
	}{
		{"empty", nil, nil, []cache.ListItem{}},
		{"redis only", []cache.ListItem{item("a", "1"), item("b", "1")}, nil, []cache.ListItem{item("a", "1"), item("b", "1")}},
		{"database only", nil, []persist.SessionSummary{row("a", "1")}, []cache.ListItem{item("a", "1")}},
		{"interleaved, a key in both once",
			[]cache.ListItem{item("a", "2"), item("b", "1"), item("c", "0")},
			[]persist.SessionSummary{row("a", "1"), row("b", "1"), row("b", "2"), row("d", "0")},
			[]cache.ListItem{item("a", "1"), item("a", "2"), item("b", "1"), item("b", "2"), item("c", "0"), item("d", "0")}},
		{"user before sid", []cache.ListItem{item("a", "z")}, []persist.SessionSummary{row("a", "zz"), row("a!", "a")},
			[]cache.ListItem{item("a", "z"), item("a", "zz"), item("a!", "a")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, mergeKeys(tc.redis, tc.db))
		})
	}
}
