package eventjson

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEventHeadAsTheServiceDecoder: eventHead reads the id and invocation
// id as the service's decoder reads an event: the keys "id" and
// "invocationId" exactly (another case is another key), the last one wins,
// null reads as "", other non-strings are refused. It read them as
// encoding/json does (keys of any case) until the service stopped decoding
// events with encoding/json: an "ID" then named the row apart from its
// event (TestStorageEventReadsTheKeysTheServiceReads).
func TestEventHeadAsTheServiceDecoder(t *testing.T) {
	for _, tc := range []struct {
		in, id, inv string
		err         bool
	}{
		{in: `{"id":"e1","invocationId":"i1","author":"model"}`, id: "e1", inv: "i1"},
		{in: `{"ID":"e1","InvocationID":"i1"}`},
		{in: `{"id":"e1","ID":"x","invocationId":"i1","invocationid":"y"}`, id: "e1", inv: "i1"},
		{in: `{"id":"e1","id":"e2","invocationId":"i1","invocationId":"i2"}`, id: "e2", inv: "i2"},
		{in: `{"id":"e1","id":null,"invocationId":null}`},
		{in: `{"id":"a\u00e9\"b","invocationId":"x\\y"}`, id: "a\u00e9\"b", inv: `x\y`},
		{in: `{"author":"model"}`},
		{in: `{"id":1,"invocationId":"i"}`, err: true},
		{in: `{"id":"e","invocationId":{"a":1}}`, err: true},
		{in: `{"id":"e","Id":{"a":1}}`, id: "e"},
		{in: `{"invocation_id":"snake","id":"e"}`, id: "e"},
	} {
		top, err := eventMembers([]byte(tc.in), false)
		require.NoError(t, err, tc.in)
		id, inv, err := eventHead(top)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.id, id, tc.in)
		require.Equal(t, tc.inv, inv, tc.in)
	}
}
