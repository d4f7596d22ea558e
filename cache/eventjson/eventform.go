package eventjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// An event has two JSON forms. The API form (ADK's api_server, adksession's
// HTTP API and its Redis cache) has the camelCase aliases of ADK's models;
// the storage form (the events.event_data column ADK Python and ADK JS read)
// is what ADK Python's Event.model_dump(exclude_none=True, mode="json")
// writes: field names. The conversion follows the models (eventmodels.go):
// only field names are renamed, never the keys of the application's maps.
// Bytes are written in URL-safe base64 with padding, as pydantic writes
// them (every ADK Python reads it); they are read back as stored.

// ADK Python's Event ignores top-level keys it does not know (extra=
// "ignore"; it rejected them before 1.28), so the storage form keeps those
// at the top level, as ADK JS's DatabaseSessionService writes them (its
// CompactedEvent's is_compacted, start_time, ...: see topExtra). ADK
// Python's EventActions rejects keys it does not know, so the storage form
// keeps only its fields there; the others (fields of adk-go or of newer ADK
// versions) travel inside custom_metadata under actionsExtraKey, in API
// form, and come back out in APIForm. An empty custom_metadata that carries
// them is marked with emptyMetaKey, so that it comes back empty, not absent.
// Rows written before the top-level rule carry an event's unknown fields
// under extraKey, in API form: APIForm still restores them.
const (
	extraKey        = "adksession:extra"
	actionsExtraKey = "adksession:actions"
	emptyMetaKey    = "adksession:empty"
)

var actionsModel = models["EventActions"]

// IsStorageForm tells whether an event's top-level keys are snake_case.
func IsStorageForm(top map[string]json.RawMessage) bool {
	for k := range top {
		if strings.Contains(k, "_") {
			return true
		}
	}
	return false
}

// StorageEvent converts an event from the form Redis keeps (the API form,
// the maps of actionMaps left out when empty) to storage form, those maps
// put back as ADK Python writes them, and reads its id and invocation id
// (as eventHead does), in one parse: what the flusher writes to an events
// row.
func StorageEvent(api []byte) (id, invocationID string, storage []byte, err error) {
	top, err := eventMembers(api, false)
	if err != nil {
		return "", "", nil, err
	}
	if id, invocationID, err = eventHead(top); err != nil {
		return "", "", nil, err
	}
	if storage, err = storageForm(top, true); err != nil {
		return "", "", nil, err
	}
	return id, invocationID, storage, nil
}

// eventHead reads the id and invocation id of an event's members as the
// service's decoder reads an event (service.eventDecoder): the keys "id"
// and "invocationId" exactly, the last one wins, null reads as "", any
// other value that is not a string is an error. A key that differs in case
// ("ID", "invocationID") is another key, kept in the row's event data with
// the rest: an id read from it would name the row apart from its event.
func eventHead(top []member) (id, inv string, err error) {
	for _, m := range top {
		var to *string
		switch m.key {
		case "id":
			to = &id
		case "invocationId":
			to = &inv
		default:
			continue
		}
		*to = ""
		if isNull(m.val) {
			continue
		}
		if err := json.Unmarshal(m.val, to); err != nil {
			return "", "", fmt.Errorf("event json: member %q: %w", m.key, err)
		}
	}
	return id, inv, nil
}

// StorageForm converts an event from API form to storage form.
func StorageForm(api []byte) ([]byte, error) {
	top, err := eventMembers(api, false)
	if err != nil {
		return nil, err
	}
	return storageForm(top, false)
}

// storageForm converts the top-level members of an API-form event to the
// storage form; with maps, the actions get those of actionMaps they lack
// (withActionMaps).
func storageForm(top []member, maps bool) ([]byte, error) {
	rest, actions, meta := splitEvent(top)
	out, _ := eventModel.convertMembers(rest, toStorage)
	var aextra []member
	if actions != nil {
		am, ok := objectMembers(actions)
		if !ok {
			return nil, errors.New("event json: actions is not an object")
		}
		var conv []member
		conv, aextra = actionsModel.convertMembers(am, toStorage)
		if maps {
			conv = withActionMaps(conv)
		}
		out = append(out, member{"actions", writeObject(conv)})
	}
	if meta != nil || len(aextra) > 0 {
		metaMembers, ok := objectMembers(meta)
		if meta != nil && !ok {
			return nil, errors.New("event json: custom_metadata is not an object")
		}
		if len(aextra) > 0 {
			if meta != nil && len(metaMembers) == 0 {
				metaMembers = append(metaMembers, member{emptyMetaKey, []byte("true")})
			}
			metaMembers = append(metaMembers, member{actionsExtraKey, writeObject(aextra)})
		}
		out = append(out, member{"custom_metadata", writeObject(metaMembers)})
	}
	return compact(writeObject(out)), nil
}

// actionMaps are the maps of an event's actions that ADK Python writes on
// every event, in its order (after state_delta), empty or not; the form
// Redis keeps leaves them out when they are empty.
var actionMaps = [...]string{"artifact_delta", "requested_auth_configs", "requested_tool_confirmations"}

// withActionMaps puts into the members of an event's actions in storage
// form those of actionMaps it lacks, empty, where ADK Python writes them:
// after state_delta and whichever of them come before.
func withActionMaps(ms []member) []member {
	at := 0 // where the next missing one goes
	if i := memberIndex(ms, "state_delta"); i >= 0 {
		at = i + 1
	}
	for _, k := range actionMaps {
		if i := memberIndex(ms, k); i >= 0 {
			at = i + 1
			continue
		}
		ms = slices.Insert(ms, at, member{k, []byte("{}")})
		at++
	}
	return ms
}

// APIForm converts an event from storage form to API form.
func APIForm(storage []byte) ([]byte, error) {
	if !json.Valid(storage) {
		return nil, errors.New("event json: not valid JSON")
	}
	out, ok := appendAPIEvent(make([]byte, 0, len(storage)+16), storage, nil)
	if !ok {
		return nil, errors.New("event json: not a JSON object")
	}
	return out, nil
}

// appendAPIEvent appends the API form of storage, a storage-form event (a
// valid JSON value), to out, with the members of cols (already in API form:
// the columns of its row) in place of the event's own of their keys; ok is
// false when storage is not an object. It restores the keys StorageForm
// moved into custom_metadata (and those of an event's top level that rows
// written before the top-level rule hold there), and writes in one pass:
// the event's members in order, converted as their fields say (the alias
// winning over the name, nulls dropped), then its custom metadata, its
// actions, the restored keys it lacks and the columns it lacks; the space a
// Postgres jsonb text has between tokens removed.
func appendAPIEvent(out, storage []byte, cols []member) ([]byte, bool) {
	it, ok := startItems(storage, '{')
	if !ok {
		return out, false
	}
	var buf [24]entry
	entries := buf[:0]
	var actions, meta []byte
	metaAlias := false
	for k, val, more := it.next(); more; k, val, more = it.next() {
		name := unquote(k)
		switch name {
		case "actions":
			if !isNull(val) {
				actions = val
			}
			continue
		case "custom_metadata", "customMetadata":
			alias := name == "customMetadata"
			if !isNull(val) && (meta == nil || alias && !metaAlias) {
				meta, metaAlias = val, alias
			}
			continue
		}
		if isNull(val) {
			continue
		}
		key, f, isAlias, _ := eventModel.resolve(name, toAPI)
		if j := entryIndex(entries, key); j >= 0 {
			if isAlias {
				entries[j].f, entries[j].val = f, val
			}
			continue
		}
		entries = append(entries, entry{key, f, val})
	}
	meta, extra, aextra := splitMeta(meta)
	if meta != nil {
		entries = append(entries, entry{"customMetadata", nil, meta})
	}
	switch {
	case aextra == nil && actions != nil:
		entries = append(entries, entry{"actions", actionsField, actions})
	case aextra != nil:
		am, ok := objectMembers(actions)
		if actions != nil && !ok {
			entries = append(entries, entry{"actions", nil, actions})
		} else {
			conv, _ := actionsModel.convertMembers(am, toAPI)
			entries = append(entries, entry{"actions", nil, writeObject(addMissing(conv, aextra))})
		}
	}
	for _, m := range extra {
		if entryIndex(entries, m.key) < 0 {
			entries = append(entries, entry{m.key, nil, m.val})
		}
	}
	for _, c := range cols {
		if j := entryIndex(entries, c.key); j >= 0 {
			entries[j].f, entries[j].val = nil, c.val
		} else {
			entries = append(entries, entry{c.key, nil, c.val})
		}
	}
	start := len(out)
	out = appendEntries(out, entries, toAPI)
	return out[:start+len(compact(out[start:]))], true
}

// splitMeta takes out of meta, an event's custom metadata in storage form
// (nil: none), the keys StorageForm moved there: extra, the event's own
// top-level keys, and aextra, its actions'. It returns what is left of meta
// (nil when nothing is left of metadata that only carried them).
func splitMeta(meta []byte) (rest []byte, extra, aextra []member) {
	metaMembers, ok := objectMembers(meta)
	if !ok {
		return meta, nil, nil
	}
	kept, empty := metaMembers[:0:0], false
	for _, m := range metaMembers {
		switch m.key {
		case extraKey:
			extra, _ = objectMembers(m.val)
		case actionsExtraKey:
			aextra, _ = objectMembers(m.val)
		case emptyMetaKey:
			empty = true
		default:
			kept = append(kept, m)
		}
	}
	if len(kept) > 0 || empty || len(extra)+len(aextra) == 0 {
		return writeObject(kept), extra, aextra
	}
	return nil, extra, aextra
}

// actionsField is the event's field "actions": its value an EventActions.
var actionsField = eventModel.keys["actions"]

// addMissing appends the members of add whose key ms does not have.
func addMissing(ms, add []member) []member {
	for _, a := range add {
		if memberIndex(ms, a.key) < 0 {
			ms = append(ms, a)
		}
	}
	return ms
}

// splitEvent takes the actions and the custom metadata (either key, the
// alias first, null as absent) out of an event's members.
func splitEvent(top []member) (rest []member, actions, meta []byte) {
	rest = make([]member, 0, len(top))
	metaAlias := false
	for _, m := range top {
		switch m.key {
		case "actions":
			if !isNull(m.val) {
				actions = m.val
			}
		case "custom_metadata", "customMetadata":
			alias := m.key == "customMetadata"
			if !isNull(m.val) && (meta == nil || alias && !metaAlias) {
				meta, metaAlias = m.val, alias
			}
		default:
			rest = append(rest, m)
		}
	}
	return rest, actions, meta
}

// compact removes, in place, the space between tokens that values kept as
// given (a Postgres jsonb text, say) carry; data is valid JSON, a buffer of
// the caller's own. Strings are copied whole.
func compact(data []byte) []byte {
	w := 0
	for i := 0; i < len(data); {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := stringEnd(data, i)
			w += copy(data[w:], data[i:j])
			i = j
		default:
			data[w] = c
			w++
			i++
		}
	}
	return data[:w]
}

// eventMembers returns the members of data, an event's JSON object, which
// it checks to be valid JSON first unless valid says it is.
func eventMembers(data []byte, valid bool) ([]member, error) {
	if !valid && !json.Valid(data) {
		return nil, errors.New("event json: not valid JSON")
	}
	top, ok := objectMembers(data)
	if !ok {
		return nil, errors.New("event json: not a JSON object")
	}
	return top, nil
}

// StandardBytes returns v, the value of the event's API-form key key, with
// every bytes field (inline data, thought signatures, ...) in standard
// base64 with padding, the form Go's encoding/json reads. It accepts either
// alphabet, with or without padding.
func StandardBytes(key string, v []byte) []byte {
	f := eventModel.keys[key]
	if f == nil || !json.Valid(v) {
		return v
	}
	return standardBytes(f, v)
}

func standardBytes(f *field, v []byte) []byte {
	if f.kind == kindBytes {
		return rebase64(v, standard)
	}
	return f.eachObject(v, (*model).standardBytes)
}

func (m *model) standardBytes(v []byte) []byte {
	ms, ok := objectMembers(v)
	if !ok {
		return v
	}
	for i := range ms {
		if f := m.keys[ms[i].key]; f != nil {
			ms[i].val = standardBytes(f, ms[i].val)
		}
	}
	return writeObject(ms)
}

// APIEvent returns the event of an events row (its event_data in storage
// form, its id, invocation_id and timestamp columns) in API form, with the
// id, invocation id and timestamp of the columns (ADK Python and ADK JS put
// timestamps of different units in event_data; the column is authoritative).
// valid says that data is known to be valid JSON (a Postgres jsonb value),
// which then is not checked again; anything else is checked first.
func APIEvent(data []byte, valid bool, id, invocationID string, ts time.Time) ([]byte, error) {
	if !valid && !json.Valid(data) {
		return nil, fmt.Errorf("event %s: event_data: not valid JSON", id)
	}
	cols := [3]member{
		{"id", jsonString(id)}, {"invocationId", jsonString(invocationID)},
		{"timestamp", AppendSeconds(nil, ts.UnixMicro())},
	}
	out, ok := appendAPIEvent(make([]byte, 0, len(data)+len(id)+len(invocationID)+48), data, cols[:])
	if !ok {
		return nil, fmt.Errorf("event %s: event_data: not a JSON object", id)
	}
	return out, nil
}
