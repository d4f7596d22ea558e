package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adksession/adksession/persist"
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

// object writes a JSON object with keys in the order they are added.
type object struct {
	buf bytes.Buffer
	err error
}

func (o *object) raw(key string, v []byte) {
	o.key(key)
	o.buf.Write(v)
}

// key writes the separator and "key":. Plain keys and strings (every known
// key, ids, authors) are written as the bytes json.Marshal would write, without
// its allocations: this runs for every field of every event appended.
func (o *object) key(key string) {
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	if plainString(key) {
		o.buf.WriteByte('"')
		o.buf.WriteString(key)
		o.buf.WriteByte('"')
	} else {
		k, _ := json.Marshal(key)
		o.buf.Write(k)
	}
	o.buf.WriteByte(':')
}

// plainString tells whether json.Marshal writes s as it is between quotes:
// printable ASCII but '"', '\\' and the HTML characters it escapes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func (o *object) value(key string, v any) {
	if o.err != nil {
		return
	}
	if s, ok := v.(string); ok && plainString(s) {
		o.key(key)
		o.buf.WriteByte('"')
		o.buf.WriteString(s)
		o.buf.WriteByte('"')
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		o.err = fmt.Errorf("%s: %w", key, err)
		return
	}
	o.raw(key, b)
}

func (o *object) extra(m map[string]json.RawMessage, known func(string) bool) {
	// Sorted, so an event always marshals to the same bytes.
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !known(k) {
			o.raw(k, m[k])
		}
	}
}

func (o *object) bytes() ([]byte, error) {
	if o.err != nil {
		return nil, o.err
	}
	if o.buf.Len() == 0 {
		return []byte("{}"), nil
	}
	o.buf.WriteByte('}')
	return o.buf.Bytes(), nil
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

// MarshalJSON writes e in ADK's API form.
func (e Event) MarshalJSON() ([]byte, error) {
	var o object
	o.buf.Grow(len(e.Content) + 512)
	o.value("id", e.ID)
	o.value("invocationId", e.InvocationID)
	o.value("author", e.Author)
	if e.Branch != "" {
		o.value("branch", e.Branch)
	}
	o.raw("timestamp", epochSeconds(e.Timestamp))
	if e.Partial {
		o.value("partial", true)
	}
	if e.TurnComplete {
		o.value("turnComplete", true)
	}
	if len(e.Content) > 0 {
		o.raw("content", e.Content)
	}
	actions, err := e.Actions.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("actions.%w", err)
	}
	o.raw("actions", actions)
	if e.LongRunningToolIDs != nil {
		o.value("longRunningToolIds", e.LongRunningToolIDs)
	}
	if e.ErrorCode != "" {
		o.value("errorCode", e.ErrorCode)
	}
	if e.ErrorMessage != "" {
		o.value("errorMessage", e.ErrorMessage)
	}
	if e.Interrupted {
		o.value("interrupted", true)
	}
	if e.CustomMetadata != nil {
		o.value("customMetadata", e.CustomMetadata)
	}
	o.extra(e.Extra, func(k string) bool { return eventKeys[k] })
	return o.bytes()
}

// MarshalJSON writes a in ADK's API form; the four maps ADK always writes
// are always present.
func (a EventActions) MarshalJSON() ([]byte, error) {
	var o object
	o.value("stateDelta", nonNilMap(a.StateDelta))
	o.value("artifactDelta", nonNilMap(a.ArtifactDelta))
	o.value("requestedAuthConfigs", nonNilMap(a.RequestedAuthConfigs))
	o.value("requestedToolConfirmations", nonNilMap(a.RequestedToolConfirmations))
	if a.TransferToAgent != "" {
		o.value("transferToAgent", a.TransferToAgent)
	}
	if a.Escalate {
		o.value("escalate", true)
	}
	if a.SkipSummarization {
		o.value("skipSummarization", true)
	}
	if a.EndOfAgent {
		o.value("endOfAgent", true)
	}
	if a.RewindBeforeInvocationID != "" {
		o.value("rewindBeforeInvocationId", a.RewindBeforeInvocationID)
	}
	if len(a.AgentState) > 0 {
		o.raw("agentState", a.AgentState)
	}
	if len(a.Compaction) > 0 {
		o.raw("compaction", a.Compaction)
	}
	o.extra(a.Extra, func(k string) bool { return actionKeys[k] })
	return o.bytes()
}

func nonNilMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// UnmarshalJSON reads an event in ADK's API form (camelCase) or storage
// form (snake_case, timestamp in seconds or milliseconds).
func (e *Event) UnmarshalJSON(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	if persist.IsStorageForm(top) {
		api, err := persist.APIForm(data)
		if err != nil {
			return err
		}
		top = nil
		if err := json.Unmarshal(api, &top); err != nil {
			return err
		}
	}
	*e = Event{}
	for k, v := range top {
		var err error
		switch k {
		case "id":
			err = unmarshalString(v, &e.ID)
		case "invocationId":
			err = unmarshalString(v, &e.InvocationID)
		case "author":
			err = unmarshalString(v, &e.Author)
		case "branch":
			err = nullable(v, &e.Branch)
		case "timestamp":
			e.Timestamp, err = parseEpoch(v)
		case "partial":
			err = nullable(v, &e.Partial)
		case "turnComplete":
			err = nullable(v, &e.TurnComplete)
		case "content":
			if string(v) != "null" {
				e.Content = v
			}
		case "actions":
			if string(v) != "null" {
				err = json.Unmarshal(v, &e.Actions)
			}
		case "longRunningToolIds":
			err = json.Unmarshal(v, &e.LongRunningToolIDs)
		case "errorCode":
			err = nullable(v, &e.ErrorCode)
		case "errorMessage":
			err = nullable(v, &e.ErrorMessage)
		case "interrupted":
			err = nullable(v, &e.Interrupted)
		case "customMetadata":
			err = json.Unmarshal(v, &e.CustomMetadata)
		default:
			if e.Extra == nil {
				e.Extra = map[string]json.RawMessage{}
			}
			e.Extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("event field %s: %w", k, err)
		}
	}
	return nil
}

// UnmarshalJSON reads actions in API form (storage form is converted by
// Event.UnmarshalJSON).
func (a *EventActions) UnmarshalJSON(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	*a = EventActions{}
	for k, v := range top {
		var err error
		switch k {
		case "stateDelta":
			err = json.Unmarshal(v, &a.StateDelta)
		case "artifactDelta":
			err = json.Unmarshal(v, &a.ArtifactDelta)
		case "transferToAgent":
			err = nullable(v, &a.TransferToAgent)
		case "escalate":
			err = nullable(v, &a.Escalate)
		case "skipSummarization":
			err = nullable(v, &a.SkipSummarization)
		case "endOfAgent":
			err = nullable(v, &a.EndOfAgent)
		case "rewindBeforeInvocationId":
			err = nullable(v, &a.RewindBeforeInvocationID)
		case "requestedAuthConfigs":
			err = json.Unmarshal(v, &a.RequestedAuthConfigs)
		case "requestedToolConfirmations":
			err = json.Unmarshal(v, &a.RequestedToolConfirmations)
		case "agentState":
			if string(v) != "null" {
				a.AgentState = v
			}
		case "compaction":
			if string(v) != "null" {
				a.Compaction = v
			}
		default:
			if a.Extra == nil {
				a.Extra = map[string]json.RawMessage{}
			}
			a.Extra[k] = v
		}
		if err != nil {
			return fmt.Errorf("actions field %s: %w", k, err)
		}
	}
	return nil
}

// nullable decodes v into p, leaving the zero value for JSON null.
// unmarshalString is json.Unmarshal into a string, without its cost for a
// string of printable ASCII without escapes (ids, names): every event read
// decodes three.
func unmarshalString(v json.RawMessage, p *string) error {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' {
		plain := true
		for _, c := range v[1 : n-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			*p = string(v[1 : n-1])
			return nil
		}
	}
	return json.Unmarshal(v, p)
}

func nullable[T any](v json.RawMessage, p *T) error {
	if string(v) == "null" {
		return nil
	}
	return json.Unmarshal(v, p)
}

// epochSeconds formats t as float epoch seconds with exactly its microseconds.
func epochSeconds(t time.Time) []byte {
	if t.IsZero() {
		return []byte("0")
	}
	us := t.UnixMicro()
	sign := ""
	if us < 0 {
		sign, us = "-", -us
	}
	b := append([]byte(sign), strconv.FormatInt(us/1e6, 10)...)
	frac := strconv.FormatInt(1e6+us%1e6, 10) // "1dddddd": the six digits, zero-padded
	return append(append(b, '.'), frac[1:]...)
}

// epochMicros reads "<seconds>[.<up to 6 digits>]" below 1e11 seconds (what
// epochSeconds writes) exactly with integers; ok is false for anything else,
// which parseEpoch reads with big.Float.
func epochMicros(s string) (us int64, ok bool) {
	secs, frac, _ := strings.Cut(s, ".")
	if secs == "" || len(secs) > 11 || len(frac) > 6 || strings.Contains(s, ".") && frac == "" {
		return 0, false
	}
	for _, part := range []string{secs, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, false
			}
		}
	}
	n, _ := strconv.ParseInt(secs, 10, 64)
	if n >= 1e11 {
		return 0, false
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+"000000"[len(frac):], 10, 64)
	}
	return n*1e6 + f, true
}

// parseEpoch reads float epoch seconds (API form) to the microsecond. A
// value above 1e11 is taken as milliseconds (ADK JS's event_data). Values
// whose microseconds do not fit an int64 are an error; AppendEvent refuses
// the others outside its range.
func parseEpoch(v json.RawMessage) (time.Time, error) {
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
