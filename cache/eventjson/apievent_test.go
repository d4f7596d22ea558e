package eventjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// oracleAPIMembers is APIForm's conversion as it was before the one-pass
// writer (appendAPIEvent): the members split, converted one by one into
// buffers of their own, and joined (the custom metadata's keys taken out as
// the writer takes them: splitMeta). FuzzAPIEvent holds the writer to it.
func oracleAPIMembers(top []member) []member {
	rest, actions, meta := splitEvent(top)
	out, _ := eventModel.convertMembers(rest, toAPI)
	var extra, aextra []member
	if meta != nil {
		if meta, extra, aextra = splitMeta(meta); meta != nil {
			out = append(out, member{"customMetadata", meta})
		}
	}
	if actions != nil || aextra != nil {
		am, ok := objectMembers(actions)
		if actions != nil && !ok {
			out = append(out, member{"actions", actions})
		} else {
			conv, _ := actionsModel.convertMembers(am, toAPI)
			out = append(out, member{"actions", writeObject(addMissing(conv, aextra))})
		}
	}
	return addMissing(out, extra)
}

// oracleAPIEvent is APIEvent by oracleAPIMembers.
func oracleAPIEvent(data []byte, id, inv string, ts time.Time) ([]byte, bool) {
	top, ok := objectMembers(data)
	if !ok {
		return nil, false
	}
	out := oracleAPIMembers(top)
	for _, c := range []member{
		{"id", jsonString(id)}, {"invocationId", jsonString(inv)},
		{"timestamp", AppendSeconds(nil, ts.UnixMicro())},
	} {
		if i := memberIndex(out, c.key); i >= 0 {
			out[i].val = c.val
		} else {
			out = append(out, c)
		}
	}
	return compact(writeObject(out)), true
}

// apiEventSeeds are storage-form events of every shape the conversion
// treats apart: duplicate keys (name and alias, in either order), nulls,
// custom metadata with the keys StorageForm stashes there (alone, with
// others, empty), actions that are not an object, jsonb's spaces, the
// columns' keys in the event, and a top-level key ADK Python does not know.
var apiEventSeeds = []string{
	`{}`,
	`{"id": "x", "invocation_id": "i", "timestamp": 1.5, "author": "a"}`,
	`{"content": {"role": "model", "parts": [{"text": "a b", "function_call": {"id": "c", "args": {"a_b": 1}}}]}, "actions": {"state_delta": {"k": 1}, "skip_summarization": null}}`,
	`{"function_call":1,"functionCall":2,"invocationId":"x","invocation_id":"y"}`,
	`{"actions":[1, 2],"custom_metadata":{"adksession:actions":{"newField":1}}}`,
	`{"actions":{"state_delta":{}},"custom_metadata":{"adksession:actions":{"newField":1},"adksession:extra":{"isCompacted":true,"actions":3}}}`,
	`{"custom_metadata":{"adksession:empty":true,"adksession:actions":{"x":1}}}`,
	`{"custom_metadata":{"k":"v"},"customMetadata":{"k2":"v2"},"custom_metadata":null}`,
	`{"custom_metadata":[1],"actions":null}`,
	`{"custom_metadata":{"adksession:extra":{"author":"z","newTop":[1]}},"author":"a"}`,
	`{"is_compacted": true, "start_time": 1, "compacted_content": {"parts": [{"inline_data": {"data": "-_8="}}]}}`,
	`{"actions":{"requested_auth_configs":{"x":{"auth_scheme":{"type":"apiKey","in":"query","name":"k"}}}}}`,
	`{"actions":{"compaction":{"start_timestamp":1,"compacted_content":{"parts":[{"text":"s"}]}}},"long_running_tool_ids":["a"]}`,
	`{"timestamp":{"a":1},"id":null,"\u0069d":"esc"}`,
}

// FuzzAPIEvent: APIEvent (and APIForm) write, for any JSON value, what the
// conversion member by member (oracleAPIEvent) writes.
func FuzzAPIEvent(f *testing.F) {
	for _, s := range apiEventSeeds {
		f.Add([]byte(s))
	}
	for _, s := range adkPythonAnswers(f) {
		for _, e := range s.Storage {
			f.Add([]byte(e))
		}
	}
	ts := time.UnixMicro(1_700_000_000_123_456)
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			if _, err := APIEvent(in, false, "e", "i", ts); err == nil {
				t.Fatalf("APIEvent(%q): no error for invalid JSON", in)
			}
			return
		}
		want, wok := oracleAPIEvent(in, "e\"1", "inv", ts)
		got, err := APIEvent(in, true, "e\"1", "inv", ts)
		if (err == nil) != wok {
			t.Fatalf("APIEvent(%s): error %v, the oracle's ok %v", in, err, wok)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("APIEvent(%s):\n got  %s\n want %s", in, got, want)
		}
		if !wok {
			return
		}
		top, _ := objectMembers(in)
		want = compact(writeObject(oracleAPIMembers(top)))
		if got, err := APIForm(in); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("APIForm(%s):\n got  %s, %v\n want %s", in, got, err, want)
		}
	})
}
