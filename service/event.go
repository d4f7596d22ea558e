package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/cache/eventjson"
)

// Event is one entry of a session's history, as ADK models it. Its JSON is
// ADK's API form (camelCase keys, timestamp in float epoch seconds);
// UnmarshalJSON also accepts ADK's storage form (snake_case, as in the
// events.event_data column). Fields this type does not name are kept in
// Extra and written back, so any event ADK writes round-trips.
type Event struct {
	ID           string
	InvocationID string
	Author       string
	Branch       string
	// Timestamp keeps microseconds. AppendEvent sets it when zero, and moves
	// it to 1µs after the previous event when it is not after it, so that
	// time order equals append order.
	Timestamp    time.Time
	Partial      bool
	TurnComplete bool
	// Content is the genai Content (role, parts with text, functionCall,
	// functionResponse, inlineData, ...) in API form, kept verbatim.
	Content            json.RawMessage
	Actions            EventActions
	LongRunningToolIDs []string
	ErrorCode          string
	ErrorMessage       string
	Interrupted        bool
	CustomMetadata     map[string]any
	// Extra holds every other field (groundingMetadata, usageMetadata,
	// finishReason, ...) by its API-form key.
	Extra map[string]json.RawMessage
}

// EventActions are the side effects an event carries.
type EventActions struct {
	// StateDelta: the state changes of the event, keys with their scope
	// prefix ("app:", "user:", "temp:" or none). A nil value stores null.
	StateDelta map[string]any
	// ArtifactDelta: file name -> artifact version.
	ArtifactDelta              map[string]int64
	TransferToAgent            string
	Escalate                   bool
	SkipSummarization          bool
	EndOfAgent                 bool
	RewindBeforeInvocationID   string
	RequestedAuthConfigs       map[string]json.RawMessage
	RequestedToolConfirmations map[string]json.RawMessage
	AgentState                 json.RawMessage
	Compaction                 json.RawMessage
	// Extra holds every other action field by its API-form key.
	Extra map[string]json.RawMessage
}

// Clone returns a deep copy of e (JSON values are shared: they are never
// modified in place).
func (e *Event) Clone() *Event {
	c := *e
	c.LongRunningToolIDs = cloneSlice(e.LongRunningToolIDs)
	c.CustomMetadata = cloneMap(e.CustomMetadata)
	c.Extra = cloneMap(e.Extra)
	c.Actions.StateDelta = cloneMap(e.Actions.StateDelta)
	c.Actions.ArtifactDelta = cloneMap(e.Actions.ArtifactDelta)
	c.Actions.RequestedAuthConfigs = cloneMap(e.Actions.RequestedAuthConfigs)
	c.Actions.RequestedToolConfirmations = cloneMap(e.Actions.RequestedToolConfirmations)
	c.Actions.Extra = cloneMap(e.Actions.Extra)
	return &c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

var eventKeys = map[string]bool{
	"id": true, "invocationId": true, "author": true, "branch": true, "timestamp": true, "partial": true,
	"turnComplete": true, "content": true, "actions": true, "longRunningToolIds": true, "errorCode": true,
	"errorMessage": true, "interrupted": true, "customMetadata": true,
}

var actionKeys = map[string]bool{
	"stateDelta": true, "artifactDelta": true, "transferToAgent": true, "escalate": true, "skipSummarization": true,
	"endOfAgent": true, "rewindBeforeInvocationId": true, "requestedAuthConfigs": true,
	"requestedToolConfirmations": true, "agentState": true, "compaction": true,
}

// MarshalJSON writes e in ADK's API form. Its raw JSON (Content, Extra,
// ...) is copied as given: json.Marshal, its caller, validates and compacts
// it in the same pass as the rest (an append writes e once, with
// jsonWriter, validated and compact).
func (e Event) MarshalJSON() ([]byte, error) {
	w := jsonWriter{buf: make([]byte, 0, len(e.Content)+512), verbatim: true}
	e.write(&w)
	return w.buf, w.err
}

// write writes e in ADK's API form.
func (e *Event) write(w *jsonWriter) {
	w.begin()
	w.str("id", e.ID)
	w.str("invocationId", e.InvocationID)
	w.str("author", e.Author)
	if e.Branch != "" {
		w.str("branch", e.Branch)
	}
	w.key("timestamp")
	w.buf = appendEpochSeconds(w.buf, e.Timestamp)
	if e.Partial {
		w.isTrue("partial")
	}
	if e.TurnComplete {
		w.isTrue("turnComplete")
	}
	if len(e.Content) > 0 {
		w.rawMember("content", e.Content)
	}
	w.key("actions")
	e.Actions.write(w)
	if e.LongRunningToolIDs != nil {
		w.key("longRunningToolIds")
		w.buf = append(w.buf, '[')
		for i, id := range e.LongRunningToolIDs {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = eventjson.AppendString(w.buf, id, true)
		}
		w.buf = append(w.buf, ']')
	}
	if e.ErrorCode != "" {
		w.str("errorCode", e.ErrorCode)
	}
	if e.ErrorMessage != "" {
		w.str("errorMessage", e.ErrorMessage)
	}
	if e.Interrupted {
		w.isTrue("interrupted")
	}
	if e.CustomMetadata != nil {
		w.member("customMetadata", e.CustomMetadata)
	}
	writeExtra(w, "", e.Extra, eventKeys)
	w.end()
}

// MarshalJSON writes a in ADK's API form, raw JSON as given (see
// Event.MarshalJSON); the four maps ADK always writes are always present.
func (a EventActions) MarshalJSON() ([]byte, error) {
	w := jsonWriter{verbatim: true}
	a.write(&w)
	return w.buf, w.err
}

// write writes a in ADK's API form.
func (a *EventActions) write(w *jsonWriter) {
	w.begin()
	w.key("stateDelta")
	w.valueAt("actions.stateDelta", nonNilMap(a.StateDelta))
	if len(a.ArtifactDelta) > 0 || !w.cached {
		w.key("artifactDelta")
		w.buf = append(w.buf, '{')
		for i, k := range sortedKeys(a.ArtifactDelta) {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = append(eventjson.AppendString(w.buf, k, true), ':')
			w.buf = strconv.AppendInt(w.buf, a.ArtifactDelta[k], 10)
		}
		w.buf = append(w.buf, '}')
	}
	writeRawMap(w, "actions.requestedAuthConfigs", a.RequestedAuthConfigs)
	writeRawMap(w, "actions.requestedToolConfirmations", a.RequestedToolConfirmations)
	if a.TransferToAgent != "" {
		w.str("transferToAgent", a.TransferToAgent)
	}
	if a.Escalate {
		w.isTrue("escalate")
	}
	if a.SkipSummarization {
		w.isTrue("skipSummarization")
	}
	if a.EndOfAgent {
		w.isTrue("endOfAgent")
	}
	if a.RewindBeforeInvocationID != "" {
		w.str("rewindBeforeInvocationId", a.RewindBeforeInvocationID)
	}
	if len(a.AgentState) > 0 {
		w.rawMember("agentState", a.AgentState)
	}
	if len(a.Compaction) > 0 {
		w.rawMember("compaction", a.Compaction)
	}
	writeExtra(w, "actions.", a.Extra, actionKeys)
	w.end()
}

// writeRawMap writes the member field (after its last dot) holding m, an
// object of raw JSON values (always present, {} when m is empty, but in the
// cached form).
func writeRawMap(w *jsonWriter, field string, m map[string]json.RawMessage) {
	if len(m) == 0 && w.cached {
		return
	}
	w.key(field[strings.LastIndexByte(field, '.')+1:])
	w.buf = append(w.buf, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = append(eventjson.AppendString(w.buf, k, true), ':')
		w.raw(field, m[k])
	}
	w.buf = append(w.buf, '}')
}

// writeExtra writes the members of extra but those known names, sorted so
// that an event always marshals to the same bytes.
func writeExtra(w *jsonWriter, at string, extra map[string]json.RawMessage, known map[string]bool) {
	for _, k := range sortedKeys(extra) {
		if !known[k] && w.err == nil {
			w.key(k)
			w.raw(at+k, extra[k])
		}
	}
}

func nonNilMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// UnmarshalJSON reads an event in ADK's API form (camelCase) or storage
// form (snake_case, timestamp in seconds or milliseconds).
func (e *Event) UnmarshalJSON(data []byte) error {
	return unmarshalEvent(bytes.Clone(data), e, nil)
}

// unmarshalEvent is UnmarshalJSON of b, which e may keep (its raw members
// alias b); names is eventDecoder.names.
func unmarshalEvent(b []byte, e *Event, names map[string]string) error {
	err := decodeEvent(b, e, true, names)
	if err != errStorageForm {
		return err
	}
	api, err := eventjson.APIForm(b)
	if err != nil {
		return err
	}
	return decodeEvent(api, e, false, names)
}

// UnmarshalJSON reads actions in API form (storage form is converted by
// Event.UnmarshalJSON).
func (a *EventActions) UnmarshalJSON(data []byte) error {
	d := eventDecoder{b: bytes.Clone(data)}
	if d.null() {
		*a = EventActions{}
		d.end()
		return d.err
	}
	err := d.actions(a)
	d.end()
	if d.err != nil {
		return d.err
	}
	return err
}

// appendEpochSeconds appends t as float epoch seconds with exactly its
// microseconds (0 for the zero time).
func appendEpochSeconds(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, '0')
	}
	return eventjson.AppendSeconds(b, t.UnixMicro())
}

// epochMicros reads "<seconds>[.<up to 6 digits>]" below 1e11 seconds (what
// epochSeconds writes) exactly with integers; ok is false for anything else,
// which parseEpoch reads with big.Float.
func epochMicros[T string | []byte](s T) (us int64, ok bool) {
	var secs, frac int64
	n, dot, fracDigits := 0, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && !dot:
			dot = true
		case c < '0' || c > '9':
			return 0, false
		case dot:
			if fracDigits++; fracDigits > 6 {
				return 0, false
			}
			frac = frac*10 + int64(c-'0')
		default:
			if n++; n > 11 {
				return 0, false
			}
			secs = secs*10 + int64(c-'0')
		}
	}
	if n == 0 || dot && fracDigits == 0 || secs >= 1e11 {
		return 0, false
	}
	for ; fracDigits < 6; fracDigits++ {
		frac *= 10
	}
	return secs*1e6 + frac, true
}

// parseEpoch reads float epoch seconds (API form) to the microsecond. A
// value above 1e11 is taken as milliseconds (ADK JS's event_data). Values
// whose microseconds do not fit an int64 are an error; AppendEvent refuses
// the others outside its range.
func parseEpoch(v json.RawMessage) (time.Time, error) {
	if us, ok := epochMicros(bytes.TrimSpace(v)); ok { // the common case, without allocating
		return time.UnixMicro(us).UTC(), nil
	}
	s := strings.TrimSpace(string(v))
	if s == "null" || s == "0" {
		return time.Time{}, nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return time.Time{}, err
		}
		if t, err := time.Parse(time.RFC3339Nano, str); err == nil {
			return t.Truncate(time.Microsecond), nil
		}
		s = str
	}
	if us, ok := epochMicros(s); ok {
		return time.UnixMicro(us).UTC(), nil
	}
	f, ok := new(big.Float).SetPrec(128).SetString(s)
	if !ok {
		return time.Time{}, fmt.Errorf("timestamp %s: not a number", s)
	}
	if f.Cmp(big.NewFloat(1e11)) > 0 {
		f.Quo(f, big.NewFloat(1000))
	}
	// Beyond ±9e12 s the microseconds overflow an int64 (the range of an
	// appended event is far narrower: see MaxTimestampMicros).
	if f.IsInf() || new(big.Float).Abs(f).Cmp(big.NewFloat(9e12)) > 0 {
		return time.Time{}, fmt.Errorf("timestamp %.40s: out of range", s)
	}
	us := new(big.Float).SetPrec(128).Mul(f, big.NewFloat(1e6))
	half := big.NewFloat(0.5)
	if us.Sign() < 0 {
		half.Neg(half)
	}
	n, _ := us.Add(us, half).Int64()
	return time.UnixMicro(n).UTC(), nil
}
