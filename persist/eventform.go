package persist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// An event has two JSON forms. The API form (ADK's api_server, adksession's
// HTTP API and its Redis cache) has camelCase keys; the storage form (the
// events.event_data column ADK Python and ADK JS read) has snake_case keys.
// Free-form maps keep the application's keys in both forms.

// freeForm are keys (in either form) whose value is the application's own
// data: copied verbatim.
var freeForm = map[string]bool{
	"stateDelta": true, "state_delta": true,
	"artifactDelta": true, "artifact_delta": true,
	"customMetadata": true, "custom_metadata": true,
	"agentState": true, "agent_state": true,
	"args": true, "response": true,
}

// idKeyed are maps keyed by function-call ids whose values are ADK objects:
// their keys are kept, their values converted.
var idKeyed = map[string]bool{
	"requestedAuthConfigs": true, "requested_auth_configs": true,
	"requestedToolConfirmations": true, "requested_tool_confirmations": true,
}

// IsStorageForm tells whether an event's top-level keys are snake_case.
func IsStorageForm(top map[string]json.RawMessage) bool {
	for k := range top {
		if strings.Contains(k, "_") {
			return true
		}
	}
	return false
}

// StorageForm converts an event from API form to storage form.
func StorageForm(api []byte) ([]byte, error) { return convertKeys(api, snake) }

// APIForm converts an event from storage form to API form.
func APIForm(storage []byte) ([]byte, error) { return convertKeys(storage, camel) }

func convertKeys(data []byte, name func(string) string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("event json: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rename(v, name)); err != nil {
		return nil, fmt.Errorf("event json: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func rename(v any, name func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			switch {
			case freeForm[k]:
				out[name(k)] = val
			case idKeyed[k]:
				m, ok := val.(map[string]any)
				if !ok {
					out[name(k)] = val
					continue
				}
				conv := make(map[string]any, len(m))
				for id, obj := range m {
					conv[id] = rename(obj, name)
				}
				out[name(k)] = conv
			default:
				out[name(k)] = rename(val, name)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, val := range x {
			out[i] = rename(val, name)
		}
		return out
	}
	return v
}

// snake converts "functionCall" to "function_call".
func snake(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteByte(c + 'a' - 'A')
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// camel converts "function_call" to "functionCall".
func camel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' && i > 0 {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

// APIEvent returns the event of a row in API form, with the id and
// invocation id of its columns (ADK Python and ADK JS put timestamps of
// different units in event_data; the column is authoritative).
func APIEvent(row EventRow) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(row.Data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("event %s: event_data: %w", row.ID, err)
	}
	api, _ := rename(v, camel).(map[string]any)
	api["id"] = row.ID
	api["invocationId"] = row.InvocationID
	us := row.Timestamp.UnixMicro()
	api["timestamp"] = json.Number(fmt.Sprintf("%d.%06d", us/1e6, us%1e6))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(api); err != nil {
		return nil, fmt.Errorf("event %s: %w", row.ID, err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
