package service

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndexEntryReadsPartsAsTheViewDoes: the entry of an event skips
// parsing a content that cannot hold a function part, and reads one the
// view's contentParts reads (encoding/json: member names in any case, or
// spelled with \u escapes) as it does.
func TestIndexEntryReadsPartsAsTheViewDoes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ content, want string }{
		{`{"role":"model","parts":[{"text":"a reply\nwith no call"}]}`, ""},
		{`{"role":"model","parts":[{"text":"a function of x"}]}`, ""},
		{`{"parts":[{"functionCall":{"id":"c1","name":"f","args":{"a":1}}}]}`, "c2:c1o2:c1"},
		{`{"parts":[{"FUNCTIONCALL":{"id":"c1","name":"f"}}]}`, "c2:c1"},
		{`{"parts":[{"function\u0043all":{"id":"c1","name":"f"}}]}`, "c2:c1"},
		{`{"parts":[{"FunctionResponse":{"id":"c1","name":"f","response":{}}}]}`, "r2:c1p2:c1"},
	} {
		e := &Event{Content: json.RawMessage(c.content)}
		require.Equal(t, c.want, compactionIndexEntry(e), c.content)
		var calls int
		for _, p := range contentParts(e.Content) {
			if p.FunctionCall != nil || p.FunctionResponse != nil {
				calls++
			}
		}
		require.Equal(t, c.want != "", calls > 0, "contentParts of %s", c.content)
	}
}
