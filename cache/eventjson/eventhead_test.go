package eventjson

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEventHeadAsEncodingJSON: eventHead reads the id and invocation id as
// the json.Unmarshal into a struct it replaced did (case-insensitive keys,
// last one wins, null kept out, other non-strings refused).
func TestEventHeadAsEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"id":"e1","invocationId":"i1","author":"model"}`,
		`{"ID":"e1","InvocationID":"i1"}`,
		`{"id":"e1","id":"e2","invocationId":"i1","invocationid":"i2"}`,
		`{"id":"e1","id":null,"invocationId":null}`,
		`{"id":"a\u00e9\"b","invocationId":"x\\y"}`,
		`{"author":"model"}`,
		`{"id":1,"invocationId":"i"}`,
		`{"id":"e","invocationId":{"a":1}}`,
		`{"invocation_id":"snake","id":"e"}`,
	} {
		var want struct {
			ID           string `json:"id"`
			InvocationID string `json:"invocationId"`
		}
		wantErr := json.Unmarshal([]byte(in), &want)
		top, err := eventMembers([]byte(in), false)
		require.NoError(t, err, in)
		id, inv, err := eventHead(top)
		if wantErr != nil {
			require.Error(t, err, in)
			continue
		}
		require.NoError(t, err, in)
		require.Equal(t, want.ID, id, in)
		require.Equal(t, want.InvocationID, inv, in)
	}
}
