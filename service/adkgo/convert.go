package adkgo

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/tool/toolconfirmation"
	"google.golang.org/genai"

	"github.com/adksession/adksession/cache/eventjson"
	"github.com/adksession/adksession/service"
)

// extraField maps one field of adk-go's session.Event that service.Event
// does not name to its key in service.Event.Extra. The key is the field's
// JSON name in adk-go (camelCase, the same name ADK Python's API form uses
// where ADK Python has the field). get reports whether the field is set:
// a nil pointer, slice or interface and a zero string or number are unset
// and stored nowhere, as adk-go's own JSON omits them.
type extraField struct {
	key string
	get func(e *session.Event) (v any, set bool)
	put func(e *session.Event, raw json.RawMessage) error
}

// pointerField is a *T field: nil is unset, a non-nil pointer is stored
// (even to a zero T) and read back as a non-nil pointer.
func pointerField[T any](key string, field func(*session.Event) **T) extraField {
	return extraField{
		key: key,
		get: func(e *session.Event) (any, bool) { p := *field(e); return p, p != nil },
		put: func(e *session.Event, raw json.RawMessage) error {
			v := new(T)
			if err := unmarshalBytes(key, raw, v); err != nil {
				return err
			}
			*field(e) = v
			return nil
		},
	}
}

// unmarshalBytes decodes raw, the value of the event's API-form key key,
// into v. genai's bytes fields decode standard base64 only; ADK Python
// writes URL-safe base64, so a value that does not decode is decoded again
// with its bytes in the standard alphabet.
func unmarshalBytes(key string, raw json.RawMessage, v any) error {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	std := eventjson.StandardBytes(key, raw)
	if string(std) == string(raw) {
		return err
	}
	return json.Unmarshal(std, v)
}

// valueField is a string or number field: the zero value is unset.
func valueField[T comparable](key string, field func(*session.Event) *T) extraField {
	return extraField{
		key: key,
		get: func(e *session.Event) (any, bool) { var zero T; v := *field(e); return v, v != zero },
		put: func(e *session.Event, raw json.RawMessage) error { return json.Unmarshal(raw, field(e)) },
	}
}

// extraFields are the fields of adk-go v2.2.0's session.Event (and its
// embedded model.LLMResponse) that service.Event has no field for and that
// keep their adk-go JSON key. The fields service.Event names, Routes and
// SessionResumptionHandle are mapped in toService and fromService.
var extraFields = []extraField{
	pointerField("citationMetadata", func(e *session.Event) **genai.CitationMetadata { return &e.CitationMetadata }),
	pointerField("groundingMetadata", func(e *session.Event) **genai.GroundingMetadata { return &e.GroundingMetadata }),
	pointerField("usageMetadata", func(e *session.Event) **genai.GenerateContentResponseUsageMetadata { return &e.UsageMetadata }),
	pointerField("logprobsResult", func(e *session.Event) **genai.LogprobsResult { return &e.LogprobsResult }),
	pointerField("inputTranscription", func(e *session.Event) **genai.Transcription { return &e.InputTranscription }),
	pointerField("outputTranscription", func(e *session.Event) **genai.Transcription { return &e.OutputTranscription }),
	valueField("modelVersion", func(e *session.Event) *string { return &e.ModelVersion }),
	valueField("finishReason", func(e *session.Event) *genai.FinishReason { return &e.FinishReason }),
	valueField("avgLogprobs", func(e *session.Event) *float64 { return &e.AvgLogprobs }),
	valueField("isolationScope", func(e *session.Event) *string { return &e.IsolationScope }),
	pointerField("requestedInput", func(e *session.Event) **session.RequestInput { return &e.RequestedInput }),
	{
		// Output is any JSON value; it reads back as encoding/json decodes
		// into any (objects as map[string]any, numbers as float64), as with
		// adk-go's own database and Vertex AI services.
		key: "output",
		get: func(e *session.Event) (any, bool) { return e.Output, e.Output != nil },
		put: func(e *session.Event, raw json.RawMessage) error { return json.Unmarshal(raw, &e.Output) },
	},
	{
		// NodeInfo: an all-zero NodeInfo reads back nil, as adk-go decodes
		// it: ADK Python writes {"path": ""} on every event, and nil means
		// the event is not a workflow node's.
		key: "nodeInfo",
		get: func(e *session.Event) (any, bool) { return e.NodeInfo, e.NodeInfo != nil },
		put: func(e *session.Event, raw json.RawMessage) error {
			var ni session.NodeInfo
			if err := json.Unmarshal(raw, &ni); err != nil {
				return err
			}
			if ni.Path != "" || ni.MessageAsOutput || len(ni.OutputFor) > 0 {
				e.NodeInfo = &ni
			}
			return nil
		},
	},
}

// toService converts an adk-go event to adksession's, field by field;
// nothing of e is shared that AppendEvent could modify.
func toService(e *session.Event) (*service.Event, error) {
	out := &service.Event{
		ID:                 e.ID,
		InvocationID:       e.InvocationID,
		Author:             e.Author,
		Branch:             e.Branch,
		Timestamp:          e.Timestamp,
		Partial:            e.Partial,
		TurnComplete:       e.TurnComplete,
		LongRunningToolIDs: slices.Clone(e.LongRunningToolIDs),
		ErrorCode:          e.ErrorCode,
		ErrorMessage:       e.ErrorMessage,
		Interrupted:        e.Interrupted,
		CustomMetadata:     maps.Clone(e.CustomMetadata),
		Actions: service.EventActions{
			StateDelta:        maps.Clone(e.Actions.StateDelta),
			ArtifactDelta:     maps.Clone(e.Actions.ArtifactDelta),
			TransferToAgent:   e.Actions.TransferToAgent,
			Escalate:          e.Actions.Escalate,
			SkipSummarization: e.Actions.SkipSummarization,
		},
	}
	if e.Content != nil {
		b, err := json.Marshal(e.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: content: %v", service.ErrInvalidArgument, e.ID, err)
		}
		out.Content = b
	}
	if e.Actions.RequestedToolConfirmations != nil {
		out.Actions.RequestedToolConfirmations = make(map[string]json.RawMessage, len(e.Actions.RequestedToolConfirmations))
		for id, c := range e.Actions.RequestedToolConfirmations {
			b, err := json.Marshal(c)
			if err != nil {
				return nil, fmt.Errorf("%w: event %s: actions.requestedToolConfirmations[%q]: %v", service.ErrInvalidArgument, e.ID, id, err)
			}
			out.Actions.RequestedToolConfirmations[id] = b
		}
	}
	for _, f := range extraFields {
		v, set := f.get(e)
		if !set {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: %s: %v", service.ErrInvalidArgument, e.ID, f.key, err)
		}
		out.Extra = setRaw(out.Extra, f.key, b)
	}
	// ADK Python's names for two of adk-go's fields: actions.route (a list
	// of routes) and liveSessionResumptionUpdate.newHandle.
	if e.Routes != nil {
		b, _ := json.Marshal(e.Routes) // strings always encode
		out.Actions.Extra = setRaw(out.Actions.Extra, routeKey, b)
	}
	if e.SessionResumptionHandle != "" {
		b, _ := json.Marshal(map[string]string{"newHandle": e.SessionResumptionHandle})
		out.Extra = setRaw(out.Extra, resumptionKey, b)
	}
	return out, nil
}

const (
	routeKey      = "route"
	resumptionKey = "liveSessionResumptionUpdate"
)

func setRaw(m map[string]json.RawMessage, k string, v json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		m = make(map[string]json.RawMessage)
	}
	m[k] = v
	return m
}

// fromService converts a stored event to adk-go's. Extra keys adk-go has
// no field for (written by ADK Python or JS) are not in the result; they
// stay in the store. StateDelta, ArtifactDelta and
// RequestedToolConfirmations come back nil when the stored map is empty:
// ADK's stored form always has these maps, so it cannot tell an empty map
// from none, and adk-go's events mostly leave them nil.
func fromService(e *service.Event) (*session.Event, error) {
	out := &session.Event{
		ID:                 e.ID,
		InvocationID:       e.InvocationID,
		Author:             e.Author,
		Branch:             e.Branch,
		Timestamp:          e.Timestamp,
		LongRunningToolIDs: slices.Clone(e.LongRunningToolIDs),
		Actions: session.EventActions{
			StateDelta:        nilIfEmpty(e.Actions.StateDelta),
			ArtifactDelta:     nilIfEmpty(e.Actions.ArtifactDelta),
			TransferToAgent:   e.Actions.TransferToAgent,
			Escalate:          e.Actions.Escalate,
			SkipSummarization: e.Actions.SkipSummarization,
		},
	}
	out.Partial = e.Partial
	out.TurnComplete = e.TurnComplete
	out.ErrorCode = e.ErrorCode
	out.ErrorMessage = e.ErrorMessage
	out.Interrupted = e.Interrupted
	out.CustomMetadata = maps.Clone(e.CustomMetadata)
	if len(e.Content) > 0 {
		out.Content = new(genai.Content)
		if err := unmarshalBytes("content", e.Content, out.Content); err != nil {
			return nil, fmt.Errorf("event %s: content: %w", e.ID, err)
		}
	}
	if len(e.Actions.RequestedToolConfirmations) > 0 {
		out.Actions.RequestedToolConfirmations = make(map[string]toolconfirmation.ToolConfirmation, len(e.Actions.RequestedToolConfirmations))
		for id, raw := range e.Actions.RequestedToolConfirmations {
			var c toolconfirmation.ToolConfirmation
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, fmt.Errorf("event %s: actions.requestedToolConfirmations[%q]: %w", e.ID, id, err)
			}
			out.Actions.RequestedToolConfirmations[id] = c
		}
	}
	for _, f := range extraFields {
		raw, ok := e.Extra[f.key]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := f.put(out, raw); err != nil {
			return nil, fmt.Errorf("event %s: %s: %w", e.ID, f.key, err)
		}
	}
	out.Routes = routes(e)
	out.SessionResumptionHandle = resumptionHandle(e)
	return out, nil
}

// routes reads actions.route: a list of strings or one string. A route
// adk-go cannot hold (a number, a boolean) is not in its view; events
// adksession stored before it used actions.route have "routes".
func routes(e *service.Event) []string {
	raw, ok := e.Actions.Extra[routeKey]
	if !ok {
		raw, ok = e.Extra["routes"]
	}
	if !ok {
		return nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil && string(raw) != "null" {
		if list == nil {
			list = []string{}
		}
		return list
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	return nil
}

// resumptionHandle reads liveSessionResumptionUpdate.newHandle (or the
// "sessionResumptionHandle" of events stored before).
func resumptionHandle(e *service.Event) string {
	var upd struct {
		NewHandle string `json:"newHandle"`
	}
	if raw, ok := e.Extra[resumptionKey]; ok && json.Unmarshal(raw, &upd) == nil {
		return upd.NewHandle
	}
	var h string
	json.Unmarshal(e.Extra["sessionResumptionHandle"], &h)
	return h
}

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
