package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/adksession/adksession/cache/eventjson"
)

// jsonWriter appends JSON to buf byte for byte as json.Marshal writes it
// (compact; '<', '>', '&', U+2028 and U+2029 escaped; invalid UTF-8 as
// \ufffd; map keys sorted), without reflection for the values events
// carry: strings, numbers, booleans and the maps and slices of decoded
// JSON. Other values go through json.Marshal. The first error is kept in
// err and ends the writing. Every event appended is written by it once
// (FuzzEventJSON holds it to encoding/json).
type jsonWriter struct {
	buf []byte
	err error
	// verbatim: raw JSON is copied as given, for a caller that validates
	// and compacts the whole (json.Marshal calling a MarshalJSON).
	verbatim bool
	// cached: the form Redis keeps (docs/redis-keys.md, "Events"): the API
	// form without the three maps of an event's actions that ADK writes on
	// every event and that are nearly always empty (artifactDelta,
	// requestedAuthConfigs, requestedToolConfirmations) when they are.
	cached bool
}

// maxValueDepth bounds the nesting written without json.Marshal, which
// detects cycles.
const maxValueDepth = 64

// begin opens an object; end closes it.
func (w *jsonWriter) begin() { w.buf = append(w.buf, '{') }
func (w *jsonWriter) end()   { w.buf = append(w.buf, '}') }

// key writes the separator, when the object has members already, and "k":.
func (w *jsonWriter) key(k string) {
	if w.buf[len(w.buf)-1] != '{' {
		w.buf = append(w.buf, ',')
	}
	w.buf = eventjson.AppendString(w.buf, k, true)
	w.buf = append(w.buf, ':')
}

// str writes the member k with the string value v.
func (w *jsonWriter) str(k, v string) {
	w.key(k)
	w.buf = eventjson.AppendString(w.buf, v, true)
}

// isTrue writes the member k with the value true.
func (w *jsonWriter) isTrue(k string) {
	w.key(k)
	w.buf = append(w.buf, "true"...)
}

// member writes the member k with the value v (see value).
func (w *jsonWriter) member(k string, v any) {
	w.key(k)
	w.valueAt(k, v)
}

// valueAt writes v (see value); field names it in an error.
func (w *jsonWriter) valueAt(field string, v any) {
	if w.err != nil {
		return
	}
	w.value(v, 0)
	if w.err != nil {
		w.err = fmt.Errorf("%s: %w", field, w.err)
	}
}

// rawMember writes the member k with the caller's raw JSON v.
func (w *jsonWriter) rawMember(k string, v []byte) {
	if w.err != nil {
		return
	}
	w.key(k)
	w.raw(k, v)
}

// raw writes raw JSON compacted and escaped as json.Marshal writes a
// json.RawMessage (nil is null); field names it in an error.
func (w *jsonWriter) raw(field string, v []byte) {
	if v == nil {
		w.buf = append(w.buf, "null"...)
		return
	}
	if w.verbatim {
		w.buf = append(w.buf, v...)
		return
	}
	start := len(w.buf)
	out := bytes.NewBuffer(w.buf)
	if err := json.Compact(out, v); err != nil {
		w.err = fmt.Errorf("%s: %w", field, err)
		return
	}
	w.buf = out.Bytes()
	if needsHTMLEscape(w.buf[start:]) {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, w.buf[start:])
		w.buf = append(w.buf[:start], esc.Bytes()...)
	}
}

// needsHTMLEscape tells whether json.HTMLEscape would change b: whether
// it holds '<', '>', '&', U+2028 or U+2029 (E2 80 A8/A9).
func needsHTMLEscape(b []byte) bool {
	for i, c := range b {
		switch c {
		case '<', '>', '&':
			return true
		case 0xE2:
			if i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
				return true
			}
		}
	}
	return false
}

// sortedKeys are the keys of m in order, nil when m is empty (one
// allocation, where slices.Sorted(maps.Keys(m)) makes several).
func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// value writes v as json.Marshal does, or sets err to json.Marshal's error.
func (w *jsonWriter) value(v any, depth int) {
	switch v := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
		return
	case string:
		w.buf = eventjson.AppendString(w.buf, v, true)
		return
	case bool:
		w.buf = strconv.AppendBool(w.buf, v)
		return
	case float64:
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			w.buf = appendJSONFloat(w.buf, v)
			return
		}
	case int:
		w.buf = strconv.AppendInt(w.buf, int64(v), 10)
		return
	case int64:
		w.buf = strconv.AppendInt(w.buf, v, 10)
		return
	case []any:
		if v != nil && depth < maxValueDepth {
			w.buf = append(w.buf, '[')
			for i, x := range v {
				if i > 0 {
					w.buf = append(w.buf, ',')
				}
				w.value(x, depth+1)
			}
			w.buf = append(w.buf, ']')
			return
		}
	case map[string]any:
		if v != nil && depth < maxValueDepth {
			w.buf = append(w.buf, '{')
			for i, k := range sortedKeys(v) {
				if i > 0 {
					w.buf = append(w.buf, ',')
				}
				w.buf = eventjson.AppendString(w.buf, k, true)
				w.buf = append(w.buf, ':')
				w.value(v[k], depth+1)
			}
			w.buf = append(w.buf, '}')
			return
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		w.err = err
		return
	}
	w.buf = append(w.buf, b...)
}

// appendJSONFloat appends f (finite) as json.Marshal writes a float64.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 -> e-7
		b = b[:n-1]
	}
	return b
}
