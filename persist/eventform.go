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
	"payload": true, "output": true,
	"setModelResponse": true, "set_model_response": true,
	"responseSchema": true, "response_schema": true,
	"responseJsonSchema": true, "response_json_schema": true,
	"parameters": true, "parametersJsonSchema": true, "parameters_json_schema": true,
}

// ADK Python's Event and EventActions models reject keys they do not know,
// so the storage form keeps only theirs. The others (fields of adk-go or of
// newer ADK versions) travel inside custom_metadata under these keys, in API
// form, and come back out in APIForm.
const (
	extraKey        = "adksession:extra"
	actionsExtraKey = "adksession:actions"
)

var storageEventKeys = setOf("id", "invocation_id", "author", "branch", "timestamp", "actions",
	"long_running_tool_ids", "model_version", "content", "grounding_metadata", "partial", "turn_complete",
	"turn_complete_reason", "finish_reason", "error_code", "error_message", "interrupted", "custom_metadata",
	"usage_metadata", "live_session_resumption_update", "live_session_id", "go_away", "live_setup_complete",
	"input_transcription", "output_transcription", "avg_logprobs", "logprobs_result", "cache_metadata",
	"citation_metadata", "interaction_id")

var storageActionKeys = setOf("skip_summarization", "state_delta", "artifact_delta", "transfer_to_agent",
	"escalate", "requested_auth_configs", "requested_tool_confirmations", "compaction", "end_of_agent",
	"agent_state", "rewind_before_invocation_id", "route", "render_ui_widgets", "set_model_response")

func setOf(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
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
func StorageForm(api []byte) ([]byte, error) {
	v, err := decodeObject(api)
	if err != nil {
		return nil, err
	}
	return encode(stashExtras(v))
}

// APIForm converts an event from storage form to API form.
func APIForm(storage []byte) ([]byte, error) {
	v, err := decodeObject(storage)
	if err != nil {
		return nil, err
	}
	return encode(toAPI(v))
}

// stashExtras renames an API-form event to storage form, moving the keys ADK
// Python does not know into custom_metadata.
func stashExtras(api map[string]any) map[string]any {
	out := map[string]any{}
	extra := map[string]any{}
	for k, v := range api {
		sk := snake(k)
		switch {
		case sk == "actions":
			actions, ok := v.(map[string]any)
			if !ok {
				out[sk] = rename(v, snake)
				continue
			}
			conv := map[string]any{}
			aextra := map[string]any{}
			for ak, av := range actions {
				if sak := snake(ak); storageActionKeys[sak] {
					conv[sak] = renameValue(ak, av, snake)
				} else {
					aextra[ak] = av
				}
			}
			out[sk] = conv
			if len(aextra) > 0 {
				extra[actionsExtraKey] = aextra
			}
		case storageEventKeys[sk]:
			out[sk] = renameValue(k, v, snake)
		default:
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		meta, _ := out["custom_metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		if a, ok := extra[actionsExtraKey]; ok {
			meta[actionsExtraKey] = a
			delete(extra, actionsExtraKey)
		}
		if len(extra) > 0 {
			meta[extraKey] = extra
		}
		out["custom_metadata"] = meta
	}
	return out
}

// toAPI renames a storage-form event to API form, restoring the keys
// stashExtras moved into custom_metadata.
func toAPI(storage map[string]any) map[string]any {
	out, _ := rename(storage, camel).(map[string]any)
	meta, _ := out["customMetadata"].(map[string]any)
	if meta == nil {
		return out
	}
	if extra, ok := meta[extraKey].(map[string]any); ok {
		for k, v := range extra {
			out[k] = v
		}
		delete(meta, extraKey)
	}
	if aextra, ok := meta[actionsExtraKey].(map[string]any); ok {
		actions, _ := out["actions"].(map[string]any)
		if actions == nil {
			actions = map[string]any{}
			out["actions"] = actions
		}
		for k, v := range aextra {
			actions[k] = v
		}
		delete(meta, actionsExtraKey)
	}
	if len(meta) == 0 {
		delete(out, "customMetadata")
	}
	return out
}

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("event json: %w", err)
	}
	return v, nil
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("event json: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// renameValue renames the keys inside the value of key k, unless it is free-form.
func renameValue(k string, v any, name func(string) string) any {
	return rename(map[string]any{k: v}, name).(map[string]any)[name(k)]
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
	v, err := decodeObject(row.Data)
	if err != nil {
		return nil, fmt.Errorf("event %s: event_data: %w", row.ID, err)
	}
	api := toAPI(v)
	api["id"] = row.ID
	api["invocationId"] = row.InvocationID
	us := row.Timestamp.UnixMicro()
	api["timestamp"] = json.Number(fmt.Sprintf("%d.%06d", us/1e6, us%1e6))
	return encode(api)
}
