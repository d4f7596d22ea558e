package eventjson

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// adkPythonAnswers reads persist/testdata/adk-python/api_answers.json: per
// "user/session", the rows as ADK Python wrote them ("storage") and what
// its api_server answers ("api_server").
func adkPythonAnswers(t testing.TB) map[string]fixtureSession {
	t.Helper()
	b, err := os.ReadFile("../../persist/testdata/adk-python/api_answers.json")
	require.NoError(t, err)
	var out map[string]fixtureSession
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

type fixtureSession struct {
	API     map[string]json.RawMessage `json:"api_server"`
	Storage []json.RawMessage          `json:"storage"`
}

// TestADKPythonFixtureForms: every event ADK Python wrote converts to the
// API form its api_server answers, and that answer converts back to the
// bytes ADK Python wrote (as JSON values).
func TestADKPythonFixtureForms(t *testing.T) {
	for name, sess := range adkPythonAnswers(t) {
		var events []json.RawMessage
		require.NoError(t, json.Unmarshal(sess.API["events"], &events))
		if len(events) != len(sess.Storage) {
			t.Fatalf("%s: %d answers for %d rows", name, len(events), len(sess.Storage))
		}
		for i, row := range sess.Storage {
			var head struct {
				ID           string  `json:"id"`
				InvocationID string  `json:"invocation_id"`
				Timestamp    float64 `json:"timestamp"`
			}
			require.NoError(t, json.Unmarshal(row, &head))
			ts := time.UnixMicro(int64(head.Timestamp*1e6 + 0.5)).UTC()
			api, err := APIEvent(row, false, head.ID, head.InvocationID, ts)
			require.NoError(t, err)
			// A row known valid (jsonb) is converted the same without the check.
			unchecked, err := APIEvent(row, true, head.ID, head.InvocationID, ts)
			require.NoError(t, err)
			require.Equal(t, string(api), string(unchecked), name+" "+head.ID)
			sameJSON(t, name+" "+head.ID+" answer", api, events[i])
			st, err := StorageForm(events[i])
			require.NoError(t, err)
			sameJSON(t, name+" "+head.ID+" storage", st, row)
		}
	}
}

// TestADKPythonCompactionForms: the compaction event ADK Python wrote
// (actions.compaction, its EventCompaction) is answered with the names its
// api_server gives, and written back with the names it wrote.
func TestADKPythonCompactionForms(t *testing.T) {
	const storage = `{"start_timestamp":1768471201.0,"end_timestamp":1768471205.0,"compacted_content":{"parts":[{"text":"summary"}],"role":"model"}}`
	const api = `{"startTimestamp":1768471201.0,"endTimestamp":1768471205.0,"compactedContent":{"parts":[{"text":"summary"}],"role":"model"}}`
	found := 0
	for name, sess := range adkPythonAnswers(t) {
		for _, row := range sess.Storage {
			var ev struct {
				ID      string                     `json:"id"`
				Actions map[string]json.RawMessage `json:"actions"`
			}
			require.NoError(t, json.Unmarshal(row, &ev))
			if ev.Actions["compaction"] == nil {
				continue
			}
			found++
			sameJSON(t, name+" "+ev.ID+" row", ev.Actions["compaction"], []byte(storage))
			got, err := APIForm(row)
			require.NoError(t, err)
			var answer struct{ Actions map[string]json.RawMessage }
			require.NoError(t, json.Unmarshal(got, &answer))
			sameJSON(t, name+" "+ev.ID+" answer", answer.Actions["compaction"], []byte(api))
			back, err := StorageForm(got)
			require.NoError(t, err)
			sameJSON(t, name+" "+ev.ID+" written back", back, row)
		}
	}
	require.Equal(t, 3, found, "the fixture's compaction events")
}

func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	require.NoError(t, json.Unmarshal(got, &g))
	require.NoError(t, json.Unmarshal(want, &w))
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got  %s\n want %s", what, got, want)
	}
}

// BenchmarkEventForms converts the 25 events of the ADK Python fixture's
// first session: StorageForm of their API form (the flusher) and APIEvent of
// their rows (a cold read).
func BenchmarkEventForms(b *testing.B) {
	sess := adkPythonAnswers(b)["py-u1/s-a"]
	var events []json.RawMessage
	require.NoError(b, json.Unmarshal(sess.API["events"], &events))
	b.Run("StorageForm", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range events {
				if _, err := StorageForm(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("APIEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range sess.Storage {
				if _, err := APIEvent(e, false, "x", "i", time.Unix(1, 0)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// FuzzEventForms: any JSON object converts both ways without a panic, to
// valid JSON, and the API form of the storage form converts to the same
// storage form again.
func FuzzEventForms(f *testing.F) {
	for _, s := range adkPythonAnswers(f) {
		for _, e := range s.Storage {
			f.Add([]byte(e))
		}
	}
	f.Add([]byte(`{"actions":{"requestedAuthConfigs":{"x":{"authScheme":{"type":"apiKey","in":"query","name":"k"}}}},"routes":[1]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, err := StorageForm(in)
		if err != nil {
			return
		}
		if !json.Valid(st) {
			t.Fatalf("StorageForm(%s) = %s: not JSON", in, st)
		}
		api, err := APIForm(st)
		if err != nil || !json.Valid(api) {
			t.Fatalf("APIForm(%s) = %s, %v", st, api, err)
		}
		if _, err := APIForm(in); err != nil {
			t.Fatalf("APIForm(%s): %v", in, err)
		}
		StandardBytes("content", in)
	})
}
