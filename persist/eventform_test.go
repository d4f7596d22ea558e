package persist

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestEventFormsRoundTrip(t *testing.T) {
	cases := []string{
		`{"id":"e1","invocationId":"i1","author":"a","timestamp":1.5,"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"snake_key":1,"camelKey":2}}},{"inlineData":{"mimeType":"image/png","data":"AAE="}}]},"actions":{"stateDelta":{"user_name":"x","app:k":null},"artifactDelta":{"my_file.txt":2},"requestedToolConfirmations":{"adk-1":{"hint":"h","payload":{"some_key":1}}},"futureAction":{"a_b":1}},"customMetadata":{"my_key":1}}`,
		`{"id":"e2","invocationId":"i2","author":"a","timestamp":2,"output":{"my_key":1},"routes":["x"],"nodeInfo":{"node_path":"p"},"actions":{"stateDelta":{}}}`,
	}
	for _, in := range cases {
		st, err := StorageForm([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(st, &top); err != nil {
			t.Fatal(err)
		}
		for k := range top {
			if !storageEventKeys[k] {
				t.Errorf("storage form of %s has key %q that ADK Python does not know", in, k)
			}
		}
		back, err := APIForm(st)
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		json.Unmarshal([]byte(in), &want)
		json.Unmarshal(back, &got)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("round trip changed the event:\n in  %s\n mid %s\n out %s", in, st, back)
		}
	}
}
