// Package eventjson is adksession's event codec: it converts an event between
// ADK's API form (camelCase, what clients, the HTTP API and Redis hold) and
// the storage form of the events.event_data column (field names, what ADK
// Python's model_dump writes; top-level fields ADK Python does not know,
// such as ADK JS's compacted-event fields, as ADK JS writes them), following
// ADK Python's and google-genai's models (eventmodels.go); it checks the keys of an event in API form
// and its bytes (CheckAPI) and rewrites its bytes fields for Go's encoding/json
// (StandardBytes). docs/persistence.md ("event_data: the storage form")
// gives the rules.
//
// It is a leaf: it imports nothing of adksession. service (validation and
// decoding), loader (cold reads), persist (the flusher's rows and the
// event_data column) and service/adkgo use it, so persist treats event JSON
// as opaque but through this package.
//
// It is internal to adksession: its exported names serve the packages of this
// module and may change at any time.
package eventjson
