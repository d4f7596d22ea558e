package adkgo

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/tool/toolconfirmation"
	"google.golang.org/genai"

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
			if err := json.Unmarshal(raw, v); err != nil {
				return err
			}
			*field(e) = v
			return nil
		},
	}
}

// valueField is a string or number field: the zero value is unset.
func valueField[T comparable](key string, field func(*session.Event) *T) extraField {
	return extraField{
		key: key,
		get: func(e *session.Event) (any, bool) { var zero T; v := *field(e); return v, v != zero },
		put: func(e *session.Event, raw json.RawMessage) error { return json.Unmarshal(raw, field(e)) },
	}
}

// extraFields are every field of adk-go v2.2.0's session.Event (and its
// embedded model.LLMResponse) that service.Event has no field for. The
// fields service.Event names are mapped in toService and fromService.
var extraFields = []extraField{
	pointerField("citationMetadata", func(e *session.Event) **genai.CitationMetadata { return &e.CitationMetadata }),
	pointerField("groundingMetadata", func(e *session.Event) **genai.GroundingMetadata { return &e.GroundingMetadata }),
	pointerField("usageMetadata", func(e *session.Event) **genai.GenerateContentResponseUsageMetadata { return &e.UsageMetadata }),
	pointerField("logprobsResult", func(e *session.Event) **genai.LogprobsResult { return &e.LogprobsResult }),
	pointerField("inputTranscription", func(e *session.Event) **genai.Transcription { return &e.InputTranscription }),
	pointerField("outputTranscription", func(e *session.Event) **genai.Transcription { return &e.OutputTranscription }),
	valueField("modelVersion", func(e *session.Event) *string { return &e.ModelVersion }),
	valueField("sessionResumptionHandle", func(e *session.Event) *string { return &e.SessionResumptionHandle }),
	valueField("finishReason", func(e *session.Event) *genai.FinishReason { return &e.FinishReason }),
	valueField("avgLogprobs", func(e *session.Event) *float64 { return &e.AvgLogprobs }),
	valueField("isolationScope", func(e *session.Event) *string { return &e.IsolationScope }),
	{
		// Routes: nil is unset; an empty, non-nil slice is stored as [] and
		// read back empty.
		key: "routes",
		get: func(e *session.Event) (any, bool) { return e.Routes, e.Routes != nil },
		put: func(e *session.Event, raw json.RawMessage) error {
			e.Routes = []string{}
			return json.Unmarshal(raw, &e.Routes)
		},
	},
	pointerField("requestedInput", func(e *session.Event) **session.RequestInput { return &e.RequestedInput }),
	{
		// Output is any JSON value; it reads back as encoding/json decodes
		// into any (objects as map[string]any, numbers as float64), as with
		// adk-go's own database and Vertex AI services.
		key: "output",
		get: func(e *session.Event) (any, bool) { return e.Output, e.Output != nil },
		put: func(e *session.Event, raw json.RawMessage) error { return json.Unmarshal(raw, &e.Output) },
	},
	pointerField("nodeInfo", func(e *session.Event) **session.NodeInfo { return &e.NodeInfo }),
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
		if out.Extra == nil {
			out.Extra = make(map[string]json.RawMessage)
		}
		out.Extra[f.key] = b
	}
	return out, nil
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
		if err := json.Unmarshal(e.Content, out.Content); err != nil {
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
	return out, nil
}

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
