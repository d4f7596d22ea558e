package eventjson

import (
	"bytes"
	"fmt"
	"strings"
)

// direction is the form a conversion writes.
type direction bool

const (
	toStorage direction = true  // snake_case field names: event_data
	toAPI     direction = false // camelCase aliases: ADK's api_server
)

// key returns the field's key in the form dir.
func (f *field) key(dir direction) string {
	if dir == toStorage {
		return f.storage
	}
	return f.api
}

// convert writes v, a valid JSON value of model m, in the form dir. A value
// that is not an object is kept as given.
func (m *model) convert(v []byte, dir direction) []byte {
	return m.appendConverted(make([]byte, 0, len(v)), v, dir)
}

// entry is a member of an object appendConverted writes: its key in the
// form written, the field whose value it is (nil: kept as given) and the
// value as given.
type entry struct {
	key string
	f   *field
	val []byte
}

// appendConverted appends v, a valid JSON value of model m, in the form dir
// (convertMembers' rules; the keys a stashExtra model stashes are dropped).
// The object is written in one pass into out, nested models too.
func (m *model) appendConverted(out, v []byte, dir direction) []byte {
	it, ok := startItems(v, '{')
	if !ok {
		return append(out, v...)
	}
	var buf [24]entry
	entries := buf[:0]
	for k, val, more := it.next(); more; k, val, more = it.next() {
		if isNull(val) {
			continue
		}
		key, f, isAlias, keep := m.resolve(unquote(k), dir)
		if !keep {
			continue
		}
		if j := entryIndex(entries, key); j >= 0 {
			if isAlias {
				entries[j].f, entries[j].val = f, val
			}
			continue
		}
		entries = append(entries, entry{key, f, val})
	}
	return appendEntries(out, entries, dir)
}

// appendEntries appends entries as a JSON object in the form dir.
func appendEntries(out []byte, entries []entry, dir direction) []byte {
	out = append(out, '{')
	for j, e := range entries {
		if j > 0 {
			out = append(out, ',')
		}
		out = append(AppendString(out, e.key, false), ':')
		if e.f == nil {
			out = append(out, e.val...)
		} else {
			out = e.f.appendConverted(out, e.val, dir)
		}
	}
	return append(out, '}')
}

func entryIndex(es []entry, key string) int {
	for i := range es {
		if es[i].key == key {
			return i
		}
	}
	return -1
}

// convertMembers converts the members of an object of model m. Members
// whose value is null are dropped (model_dump(exclude_none=True)). Keys m
// does not list follow m.extra; stashed returns those of a stashExtra
// model written to storage. When two keys name one field (say
// "function_call" and "functionCall"), the alias (the camelCase key) wins,
// as pydantic reads it first.
func (m *model) convertMembers(in []member, dir direction) (out, stashed []member) {
	out = make([]member, 0, len(in))
	for _, mb := range in {
		if isNull(mb.val) {
			continue
		}
		key, f, isAlias, keep := m.resolve(mb.key, dir)
		if !keep {
			stashed = append(stashed, mb)
			continue
		}
		val := mb.val
		if f != nil {
			val = f.convert(mb.val, dir)
		}
		if i := memberIndex(out, key); i >= 0 {
			if isAlias {
				out[i].val = val
			}
			continue
		}
		out = append(out, member{key, val})
	}
	return out, stashed
}

// resolve returns the key k of an object of model m becomes in the form
// dir, the field whose value it holds (nil: its value is kept as given),
// whether it is the alias of its field (the alias wins over the name), and
// false for keep when a stashExtra model written to storage stashes it.
func (m *model) resolve(k string, dir direction) (key string, f *field, isAlias, keep bool) {
	if f := m.keys[k]; f != nil {
		return f.key(dir), f, k == f.api, true
	}
	switch {
	case m.extra == keepExtra:
		return k, nil, false, true
	case m.extra == stashExtra && dir == toStorage:
		return "", nil, false, false
	case m.extra == topExtra && dir == toStorage:
		key = jsSnake(k)
		return key, nil, key != k, true
	case m.extra == topExtra:
		key = jsCamel(k)
		return key, nil, key == k, true
	case dir == toStorage:
		key = snake(k)
		return key, nil, key != k, true
	}
	return camel(k), nil, true, true
}

// convert writes v, the value of field f, in the form dir.
func (f *field) convert(v []byte, dir direction) []byte {
	if f.kind == kindValue || f.kind == kindBytes && dir == toAPI {
		return v
	}
	return f.appendConverted(make([]byte, 0, len(v)), v, dir)
}

// appendConverted appends v, the value of field f, in the form dir: the
// objects of model f.model it holds (v itself, the elements of a list, the
// values of a map) converted; a value of another field, or not of the
// field's shape, as given.
func (f *field) appendConverted(out, v []byte, dir direction) []byte {
	switch f.kind {
	case kindBytes:
		if dir == toStorage {
			return append(out, rebase64(v, urlSafe)...)
		}
	case kindScheme:
		return append(out, authScheme(v, dir)...)
	case kindModel:
		return f.model.appendConverted(out, v, dir)
	case kindModelList, kindModelMap:
		open := byte('[')
		if f.kind == kindModelMap {
			open = '{'
		}
		it, ok := startItems(v, open)
		if !ok {
			break
		}
		out = append(out, open)
		for n := 0; ; n++ {
			k, e, more := it.next()
			if !more {
				break
			}
			if n > 0 {
				out = append(out, ',')
			}
			if open == '{' {
				out = append(AppendString(out, unquote(k), false), ':')
			}
			out = f.model.appendConverted(out, e, dir)
		}
		return append(out, open+2) // ']' and '}' follow '[' and '{' by 2
	}
	return append(out, v...)
}

// eachObject applies fn to the objects of model f.model that v, the value
// of f, holds: v itself, the elements of a list, the values of a map. A
// value of another field, or not of the field's shape, is kept as given.
func (f *field) eachObject(v []byte, fn func(m *model, obj []byte) []byte) []byte {
	switch f.kind {
	case kindModel:
		return fn(f.model, v)
	case kindModelList:
		elems, ok := arrayElements(v)
		if !ok {
			return v
		}
		for i, e := range elems {
			elems[i] = fn(f.model, e)
		}
		return writeArray(elems)
	case kindModelMap:
		ms, ok := objectMembers(v)
		if !ok {
			return v
		}
		for i := range ms {
			ms[i].val = fn(f.model, ms[i].val)
		}
		return writeObject(ms)
	}
	return v
}

// alphabet is a base64 alphabet.
type alphabet bool

const (
	urlSafe  alphabet = true  // RFC 4648 §5 ('-', '_'): what pydantic writes
	standard alphabet = false // RFC 4648 §4 ('+', '/'): what Go's encoding/json reads
)

var (
	toURLSafe  = strings.NewReplacer("+", "-", "/", "_")
	toStandard = strings.NewReplacer("-", "+", "_", "/")
)

// rebase64 rewrites v, a JSON string of base64 in either alphabet, with or
// without padding, in alphabet a with padding. The two alphabets differ in
// two characters only, so the bytes are not decoded. Anything else (not a
// string, not base64) is kept as given.
func rebase64(v []byte, a alphabet) []byte {
	if !isJSONString(v) {
		return v
	}
	s := unquote(v)
	body := strings.TrimRight(s, "=")
	if len(body)%4 == 1 || strings.IndexFunc(body, notBase64) >= 0 {
		return v
	}
	if a == urlSafe {
		body = toURLSafe.Replace(body)
	} else {
		body = toStandard.Replace(body)
	}
	body += "=="[:(4-len(body)%4)%4]
	if body == s && bytes.IndexByte(v, '\\') < 0 {
		return v
	}
	return []byte(`"` + body + `"`)
}

func notBase64(r rune) bool {
	return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '/' || r == '-' || r == '_')
}

// bytesProblem tells why v, the JSON value of a bytes field, is not base64
// that every reader of adksession's events decodes to the same bytes, or
// "" when it is (null too: no bytes). Those readers are ADK Python
// (pydantic, val_json_bytes="base64"), adk-go (Go's encoding/json, after
// service/adkgo's rewrite to the standard alphabet with padding: see
// rebase64) and ADK JS (the model API's protobuf JSON parser). What all of
// them take: a string in one alphabet, standard (RFC 4648 §4, '+' '/') or
// URL-safe (§5, '-' '_'), padded, unpadded or with the one '=' pydantic
// accepts for two missing, and no bits set after its last byte (pydantic
// refuses "AB", which Go reads as "AA").
func bytesProblem(v []byte) string {
	if isNull(v) {
		return ""
	}
	if !isJSONString(v) {
		return "a bytes field is a string of base64"
	}
	s := unquote(v)
	body := strings.TrimRight(s, "=")
	pad := len(s) - len(body)
	std, url := false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case isAlnum(c):
		case c == '+' || c == '/':
			std = true
		case c == '-' || c == '_':
			url = true
		default:
			return fmt.Sprintf("not base64: %q at offset %d", c, i)
		}
	}
	last := byte(0)
	if len(body) > 0 {
		last = base64Value(body[len(body)-1])
	}
	switch rem := len(body) % 4; {
	case std && url:
		return "not base64: it mixes the standard ('+', '/') and URL-safe ('-', '_') alphabets"
	case rem == 1:
		return fmt.Sprintf("not base64: %d characters (a multiple of 4, less 2 or 3 without padding)", len(body))
	case pad > 0 && !(rem == 2 && pad <= 2 || rem == 3 && pad == 1):
		return fmt.Sprintf("not base64: %d '=' after %d characters", pad, len(body))
	case rem == 2 && last&0x0f != 0, rem == 3 && last&0x03 != 0:
		return fmt.Sprintf("not base64: its last character %q sets bits after the last byte", body[len(body)-1])
	}
	return ""
}

// base64Value is the 6 bits of a base64 character of either alphabet.
func base64Value(c byte) byte {
	switch {
	case c >= 'A' && c <= 'Z':
		return c - 'A'
	case c >= 'a' && c <= 'z':
		return c - 'a' + 26
	case c >= '0' && c <= '9':
		return c - '0' + 52
	case c == '+' || c == '-':
		return 62
	}
	return 63
}

// camel is pydantic's alias_generators.to_camel: "function_call" ->
// "functionCall", "x_2d" -> "x2D"; a key already in camelCase is kept.
func camel(s string) string {
	if alreadyCamel(s) {
		return s
	}
	// to_pascal: str.title(), then drop "_" between an alphanumeric and a
	// digit or capital.
	t := []byte(s)
	prevLetter := false
	for i, c := range t {
		isLetter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		switch {
		case isLetter && !prevLetter && c >= 'a':
			t[i] = c - 'a' + 'A'
		case isLetter && prevLetter && c <= 'Z':
			t[i] = c - 'A' + 'a'
		}
		prevLetter = isLetter
	}
	out := make([]byte, 0, len(t))
	for i, c := range t {
		if c == '_' && i > 0 && i+1 < len(t) && isAlnum(t[i-1]) && (isDigit(t[i+1]) || t[i+1] >= 'A' && t[i+1] <= 'Z') {
			continue
		}
		out = append(out, c)
	}
	// Lower the first capital after leading underscores.
	for i, c := range out {
		if c != '_' {
			if c >= 'A' && c <= 'Z' {
				out[i] = c - 'A' + 'a'
			}
			break
		}
	}
	return string(out)
}

// alreadyCamel is to_camel's shortcut: ^[a-z]+[A-Za-z0-9]*$ without a
// digit followed by a lowercase letter.
func alreadyCamel(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) {
			return false
		}
		if isDigit(c) && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// snake converts "functionCall" to "function_call": the inverse of camel
// for the names it writes.
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

// jsSnake is ADK JS's toSnakeCaseKey, what its DatabaseSessionService
// writes for an event key: every capital becomes "_" and its lowercase
// ("isCompacted" -> "is_compacted", "ID" -> "_i_d").
func jsSnake(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b.WriteByte('_')
			b.WriteByte(c + 'a' - 'A')
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// jsCamel is ADK JS's toCamelCaseKey, what its DatabaseSessionService reads
// an event key back as: every "_" before a lowercase letter goes and the
// letter becomes a capital ("is_compacted" -> "isCompacted"). It gives back
// every key without "_" that jsSnake wrote.
func jsCamel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '_' && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z' {
			b.WriteByte(s[i+1] - 'a' + 'A')
			i++
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
