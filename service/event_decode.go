package service

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// eventDecoder reads an event in ADK's API form in one pass over its
// bytes, without reflection: what every read of a session does once per
// event. It reads exactly what encoding/json would (FuzzEventDecode holds
// it to referenceUnmarshal, the decoding by encoding/json): the same
// values, and an error for the same inputs. The event's raw members
// (content, agentState, compaction, Extra, ...) alias its input.
//
// A member of the wrong type is an error unless a later member of the
// same key is decoded without one: encoding/json reads an object into a
// map first, where the last of duplicate keys wins.
type eventDecoder struct {
	b     []byte
	i     int
	depth int   // objects and arrays open at i
	err   error // the first syntax error: the input is not JSON

	storage bool // a top-level key holds '_': the event is in storage form

	// names, when not nil, keeps the strings of invocation ids, authors and
	// branches read so far, to share them: a session's events repeat them.
	names map[string]string
}

// maxNames bounds eventDecoder.names.
const maxNames = 256

// errDepth is encoding/json's refusal of JSON nested deeper than it reads.
var errDepth = errors.New("exceeded max depth")

// decodeEvent reads b into e (e is reset first). With detect, an event
// in storage form is errStorageForm. names is eventDecoder.names.
func decodeEvent(b []byte, e *Event, detect bool, names map[string]string) error {
	d := eventDecoder{b: b, names: names}
	*e = Event{}
	if d.null() { // encoding/json reads null into a map as nothing
		d.end()
		return d.err
	}
	var typeErrs map[string]error
	d.object(func(k []byte) {
		err := d.eventMember(k, e)
		if err == nil {
			delete(typeErrs, string(k))
			return
		}
		if typeErrs == nil {
			typeErrs = map[string]error{}
		}
		typeErrs[string(k)] = fmt.Errorf("event field %s: %w", k, err)
	})
	d.end()
	if d.err != nil {
		return d.err
	}
	if d.storage && detect {
		return errStorageForm
	}
	for _, err := range typeErrs {
		return err
	}
	return nil
}

// errStorageForm tells decodeEvent's caller to convert the event from
// ADK's storage form first.
var errStorageForm = errors.New("storage form")

// eventMember reads the value of the event's member k.
func (d *eventDecoder) eventMember(k []byte, e *Event) error {
	if bytes.IndexByte(k, '_') >= 0 {
		d.storage = true
	}
	switch string(k) {
	case "id":
		return d.str(&e.ID)
	case "invocationId":
		return d.name(&e.InvocationID)
	case "author":
		return d.name(&e.Author)
	case "branch":
		return d.name(&e.Branch)
	case "timestamp":
		raw := d.raw()
		if d.err != nil {
			return nil
		}
		var err error
		e.Timestamp, err = parseEpoch(raw)
		return err
	case "partial":
		return d.bool(&e.Partial)
	case "turnComplete":
		return d.bool(&e.TurnComplete)
	case "content":
		e.Content = d.rawOrNil()
	case "actions":
		return d.actions(&e.Actions)
	case "longRunningToolIds":
		return d.strings(&e.LongRunningToolIDs)
	case "errorCode":
		return d.str(&e.ErrorCode)
	case "errorMessage":
		return d.str(&e.ErrorMessage)
	case "interrupted":
		return d.bool(&e.Interrupted)
	case "customMetadata":
		return d.anyMap(&e.CustomMetadata)
	default:
		raw := d.raw()
		if e.Extra == nil {
			e.Extra = map[string]json.RawMessage{}
		}
		e.Extra[string(k)] = raw
	}
	return nil
}

// actions reads an EventActions object (null: none).
func (d *eventDecoder) actions(a *EventActions) error {
	*a = EventActions{}
	if d.null() {
		return nil
	}
	if !d.peek('{') {
		d.skip()
		return errors.New("actions: not an object")
	}
	var typeErrs map[string]error
	d.object(func(k []byte) {
		err := d.actionMember(k, a)
		if err == nil {
			delete(typeErrs, string(k))
			return
		}
		if typeErrs == nil {
			typeErrs = map[string]error{}
		}
		typeErrs[string(k)] = fmt.Errorf("actions field %s: %w", k, err)
	})
	for _, err := range typeErrs {
		return err
	}
	return nil
}

func (d *eventDecoder) actionMember(k []byte, a *EventActions) error {
	switch string(k) {
	case "stateDelta":
		return d.anyMap(&a.StateDelta)
	case "artifactDelta":
		return d.intMap(&a.ArtifactDelta)
	case "transferToAgent":
		return d.str(&a.TransferToAgent)
	case "escalate":
		return d.bool(&a.Escalate)
	case "skipSummarization":
		return d.bool(&a.SkipSummarization)
	case "endOfAgent":
		return d.bool(&a.EndOfAgent)
	case "rewindBeforeInvocationId":
		return d.str(&a.RewindBeforeInvocationID)
	case "requestedAuthConfigs":
		return d.rawMap(&a.RequestedAuthConfigs)
	case "requestedToolConfirmations":
		return d.rawMap(&a.RequestedToolConfirmations)
	case "agentState":
		a.AgentState = d.rawOrNil()
	case "compaction":
		a.Compaction = d.rawOrNil()
	default:
		raw := d.raw()
		if a.Extra == nil {
			a.Extra = map[string]json.RawMessage{}
		}
		a.Extra[string(k)] = raw
	}
	return nil
}

// Scanning. Each reader below consumes one value, valid or not: a syntax
// error is kept in d.err (and stops the scan), a value of the wrong type
// is returned.

func (d *eventDecoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("invalid JSON at byte %d: %s", d.i, why)
	}
	d.i = len(d.b)
}

func (d *eventDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek skips whitespace and tells whether the next byte is c.
func (d *eventDecoder) peek(c byte) bool {
	d.ws()
	return d.i < len(d.b) && d.b[d.i] == c
}

// null consumes a null.
func (d *eventDecoder) null() bool {
	d.ws()
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// end checks that only whitespace follows the value.
func (d *eventDecoder) end() {
	d.ws()
	if d.i < len(d.b) {
		d.fail("data after the top-level value")
	}
}

// object reads an object, calling member with each key with d at its value
// (member must consume the value).
func (d *eventDecoder) object(member func(k []byte)) {
	if !d.peek('{') {
		d.fail("not an object")
		return
	}
	if d.depth++; d.depth > maxJSONDepth {
		d.fail(errDepth.Error())
		return
	}
	defer func() { d.depth-- }()
	d.i++
	if d.peek('}') {
		d.i++
		return
	}
	for d.err == nil {
		d.ws()
		k, ok := d.key()
		if !ok {
			return
		}
		if !d.peek(':') {
			d.fail("no ':' after an object key")
			return
		}
		d.i++
		member(k)
		if d.err != nil {
			return
		}
		d.ws()
		if d.i >= len(d.b) {
			d.fail("unterminated object")
			return
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return
		default:
			d.fail("no ',' or '}' after an object member")
			return
		}
	}
}

// key reads an object key: its bytes (in the input when it has no escape).
func (d *eventDecoder) key() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		d.fail("an object key is not a string")
		return nil, false
	}
	start := d.i
	if d.scanString() {
		return d.b[start+1 : d.i-1], true
	}
	if d.err != nil {
		return nil, false
	}
	return []byte(d.unquote(start, false)), true
}

// scanString consumes a string at d.i (at its '"'): plain tells that it
// holds only printable ASCII without escapes (its bytes are its value).
func (d *eventDecoder) scanString() (plain bool) {
	b, i := d.b, d.i+1
	plain = true
	for {
		// Eight bytes at a time while none of them ends the string, starts
		// an escape, is a control character or is not ASCII: most of an
		// event's bytes are in its text.
		for i+8 <= len(b) && !specialInString(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			d.i = i + 1
			return plain
		case c == '\\':
			plain = false
			i++
			if i >= len(b) {
				d.i = i
				d.fail("unterminated string")
				return false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 || !isHex4(b[i+1:i+5]) {
					d.i = i
					d.fail(`invalid \u escape`)
					return false
				}
				i += 5
			default:
				d.i = i
				d.fail("invalid escape")
				return false
			}
		case c < 0x20:
			d.i = i
			d.fail("control character in a string")
			return false
		default:
			if c >= 0x80 {
				plain = false
			}
			i++
		}
	}
	d.i = i
	d.fail("unterminated string")
	return false
}

// specialInString tells whether one of the eight bytes of w (little
// endian) is a quote, a backslash, a control character or not ASCII: the
// bytes scanString looks at one by one. (x - 0x01..) & ^x & 0x80.. has a
// high bit set in some byte exactly when a byte of x is zero, and
// (x - n*0x01..) & ^x & 0x80.. when a byte is below n (n <= 0x80).
func specialInString(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(w-ones*0x20)&^w|w)&highs != 0
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// unquote is the value of the string scanned from start to d.i.
func (d *eventDecoder) unquote(start int, plain bool) string {
	if plain {
		return string(d.b[start+1 : d.i-1])
	}
	var s string
	if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
		d.fail(err.Error())
	}
	return s
}

// skip consumes one value of any kind, checking its syntax.
func (d *eventDecoder) skip() {
	d.ws()
	if d.i >= len(d.b) {
		d.fail("unexpected end of input")
		return
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.object(func([]byte) { d.skip() })
	case c == '[':
		d.array(d.skip)
	case c == '"':
		d.scanString()
	case c == '-' || '0' <= c && c <= '9':
		d.number()
	default:
		d.literal()
	}
}

// array reads an array (d at its '['), calling elem with d at each element.
func (d *eventDecoder) array(elem func()) {
	if d.depth++; d.depth > maxJSONDepth {
		d.fail(errDepth.Error())
		return
	}
	defer func() { d.depth-- }()
	d.i++ // '['
	if d.peek(']') {
		d.i++
		return
	}
	for d.err == nil {
		elem()
		if d.err != nil {
			return
		}
		d.ws()
		if d.i >= len(d.b) {
			d.fail("unterminated array")
			return
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return
		default:
			d.fail("no ',' or ']' after an array element")
			return
		}
	}
}

// number consumes a number; it returns its text.
func (d *eventDecoder) number() []byte {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case digits() == 0:
		d.fail("invalid number")
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			d.fail("invalid number")
			return nil
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			d.fail("invalid number")
			return nil
		}
	}
	return d.b[start:d.i]
}

// literal consumes true, false or null.
func (d *eventDecoder) literal() {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
			d.i += len(lit)
			return
		}
	}
	d.fail("invalid value")
}

// raw consumes a value and returns its bytes.
func (d *eventDecoder) raw() json.RawMessage {
	d.ws()
	start := d.i
	d.skip()
	return d.b[start:d.i:d.i]
}

// rawOrNil is raw, nil for null.
func (d *eventDecoder) rawOrNil() json.RawMessage {
	if d.null() {
		return nil
	}
	return d.raw()
}

// Typed readers: what encoding/json reads into a field of that type.

// str reads a string (null: "").
func (d *eventDecoder) str(p *string) error {
	*p = ""
	if d.null() {
		return nil
	}
	if !d.peek('"') {
		d.skip()
		return errors.New("not a string")
	}
	start := d.i
	plain := d.scanString()
	if d.err == nil {
		*p = d.unquote(start, plain)
	}
	return nil
}

// name is str, sharing the strings of d.names.
func (d *eventDecoder) name(p *string) error {
	if d.names == nil || !d.peek('"') {
		return d.str(p)
	}
	start := d.i
	if !d.scanString() {
		*p = ""
		if d.err == nil {
			*p = d.unquote(start, false)
		}
		return nil
	}
	b := d.b[start+1 : d.i-1]
	if s, ok := d.names[string(b)]; ok {
		*p = s
		return nil
	}
	*p = string(b)
	if len(d.names) < maxNames {
		d.names[*p] = *p
	}
	return nil
}

// bool reads a boolean (null: false).
func (d *eventDecoder) bool(p *bool) error {
	*p = false
	d.ws()
	switch {
	case d.null():
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		*p = true
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
	default:
		d.skip()
		return errors.New("not a boolean")
	}
	return nil
}

// strings reads an array of strings (null: nil; a null element: "").
func (d *eventDecoder) strings(p *[]string) error {
	*p = nil
	if d.null() {
		return nil
	}
	if !d.peek('[') {
		d.skip()
		return errors.New("not an array")
	}
	out := []string{}
	var err error
	d.array(func() {
		var s string
		if e := d.str(&s); e != nil && err == nil {
			err = e
		}
		out = append(out, s)
	})
	*p = out
	return err
}

// anyMap reads an object of any values (null: nil).
func (d *eventDecoder) anyMap(p *map[string]any) error {
	*p = nil
	if d.null() {
		return nil
	}
	if !d.peek('{') {
		d.skip()
		return errors.New("not an object")
	}
	m, err := d.anyObject()
	*p = m
	return err
}

func (d *eventDecoder) anyObject() (map[string]any, error) {
	m := map[string]any{}
	var err error
	d.object(func(k []byte) {
		v, e := d.value()
		if e != nil && err == nil {
			err = e
		}
		m[string(k)] = v
	})
	return m, err
}

// value reads any value as encoding/json reads it into an interface{}.
func (d *eventDecoder) value() (any, error) {
	d.ws()
	if d.i >= len(d.b) {
		d.fail("unexpected end of input")
		return nil, nil
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.anyObject()
	case c == '[':
		out := []any{}
		var err error
		d.array(func() {
			v, e := d.value()
			if e != nil && err == nil {
				err = e
			}
			out = append(out, v)
		})
		return out, err
	case c == '"':
		start := d.i
		plain := d.scanString()
		if d.err != nil {
			return nil, nil
		}
		return d.unquote(start, plain), nil
	case c == '-' || '0' <= c && c <= '9':
		tok := d.number()
		if d.err != nil {
			return nil, nil
		}
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", tok, err)
		}
		return f, nil
	case c == 't':
		d.literal()
		return true, nil
	case c == 'f':
		d.literal()
		return false, nil
	default:
		d.literal()
		return nil, nil
	}
}

// intMap reads an object of integers (null: nil; a null value: 0).
func (d *eventDecoder) intMap(p *map[string]int64) error {
	*p = nil
	if d.null() {
		return nil
	}
	if !d.peek('{') {
		d.skip()
		return errors.New("not an object")
	}
	m := map[string]int64{}
	var err error
	d.object(func(k []byte) {
		if d.null() {
			m[string(k)] = 0
			return
		}
		d.ws()
		if d.i < len(d.b) && (d.b[d.i] == '-' || '0' <= d.b[d.i] && d.b[d.i] <= '9') {
			tok := d.number()
			if d.err != nil {
				return
			}
			n, e := strconv.ParseInt(string(tok), 10, 64)
			if e != nil && err == nil {
				err = fmt.Errorf("%q: number %s is not an int64", k, tok)
			}
			m[string(k)] = n
			return
		}
		d.skip()
		if err == nil {
			err = fmt.Errorf("%q: not a number", k)
		}
	})
	*p = m
	return err
}

// rawMap reads an object of raw values (null: nil).
func (d *eventDecoder) rawMap(p *map[string]json.RawMessage) error {
	*p = nil
	if d.null() {
		return nil
	}
	if !d.peek('{') {
		d.skip()
		return errors.New("not an object")
	}
	m := map[string]json.RawMessage{}
	d.object(func(k []byte) { m[string(k)] = d.raw() })
	*p = m
	return nil
}
