package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/adksession/adksession/cache/eventjson"
)

// jsonScan looks for what Redis and the database would not hold alike in
// encoded JSON: a NUL character (Postgres's jsonb refuses "\u0000"), invalid
// UTF-8 (jsonb would store U+FFFD), an unpaired UTF-16 surrogate escape
// (jsonb refuses it, encoding/json reads U+FFFD), and a number beyond a
// double's range (it cannot be read back into a float64). encoding/json
// writes the invalid UTF-8 of a Go string as the escape "\ufffd": that
// escape is refused too, except inside the raw JSON an event carries
// (rawEventJSON: there it is a U+FFFD someone wrote).
//
// Use: var sc jsonScan; if !sc.check(b, false) { return sc.err(field) }.
// One pass over b.
type jsonScan struct {
	b         []byte
	event     bool // b is an event in API form
	validUTF8 bool // utf8.Valid(b): strings need no decoding

	stack []jsonFrame // open objects and arrays
	buf   [16]jsonFrame
	keys  [rawDepth][]byte // keys of the first levels, for raw

	// The first problem: where, what, and whether it is in an object key.
	at     int
	reason string
	inKey  bool
}

// scans keeps jsonScans for reuse: one is about 700 bytes, which escape
// analysis puts on the heap (its stack starts in its own array), and every
// append scans twice (the delta's values, the event).
var scans = sync.Pool{New: func() any { return new(jsonScan) }}

// getScan returns a jsonScan from the pool; putScan gives it back.
func getScan() *jsonScan { return scans.Get().(*jsonScan) }

func putScan(s *jsonScan) {
	*s = jsonScan{} // holds no caller's bytes while pooled
	scans.Put(s)
}

// check scans b, JSON produced by encoding/json (anything else is reported,
// never panicked on); event tells that b is an event in API form. It
// returns false when it found a problem.
func (s *jsonScan) check(b []byte, event bool) bool {
	*s = jsonScan{b: b, event: event, validUTF8: utf8.Valid(b)}
	s.stack = s.buf[:0]
	return s.run()
}

// err is the problem as an ErrInvalidArgument naming the JSON path of the
// offending value under field, e.g. `actions.stateDelta["k"][2].name:
// contains NUL`.
func (s *jsonScan) err(field string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidArgument, s.path(field), s.reason)
}

// maxJSONDepth is encoding/json's nesting limit: deeper JSON would not
// read back.
const maxJSONDepth = 10000

// rawDepth bounds how deep jsonScan asks rawEventJSON: below it, a value is
// raw when its container is.
const rawDepth = 3

// jsonFrame is one open object or array.
type jsonFrame struct {
	array   bool
	raw     bool
	wantKey bool // object: the next string is a key
	index   int  // array: index of the current element
	key     [2]int
}

// stopInString marks the bytes a string scan stops at: quote, backslash,
// control characters; stopNonASCII adds the bytes of multi-byte runes.
var stopInString, stopNonASCII [256]bool

func init() {
	for c := range 256 {
		stopInString[c] = c == '"' || c == '\\' || c < 0x20
		stopNonASCII[c] = stopInString[c] || c >= 0x80
	}
}

func (s *jsonScan) fail(at int, reason string) bool {
	s.at, s.reason = at, reason
	return false
}

// run scans s.b; false means a problem was recorded.
func (s *jsonScan) run() bool {
	b := s.b
	seen := false // a top-level value was read
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case ':':
			i++
		case ',':
			if len(s.stack) == 0 {
				return s.fail(i, "not valid JSON")
			}
			f := &s.stack[len(s.stack)-1]
			if f.array {
				f.index++
			} else {
				f.wantKey = true
			}
			i++
		case '}', ']':
			if len(s.stack) == 0 || s.stack[len(s.stack)-1].array != (c == ']') {
				return s.fail(i, "not valid JSON")
			}
			s.stack = s.stack[:len(s.stack)-1]
			i++
		case '"':
			key := len(s.stack) > 0 && s.stack[len(s.stack)-1].wantKey
			raw := false
			if key {
				raw = s.stack[len(s.stack)-1].raw
			} else {
				if len(s.stack) == 0 && seen {
					return s.fail(i, "not valid JSON")
				}
				seen = true
				raw = s.valueRaw()
			}
			end, ok := s.str(i, raw)
			if !ok {
				s.inKey = key
				return false
			}
			if key {
				f := &s.stack[len(s.stack)-1]
				f.wantKey, f.key = false, [2]int{i, end}
				if d := len(s.stack); d <= rawDepth {
					s.keys[d-1] = b[i+1 : end-1]
				}
			}
			i = end
		case '{', '[':
			if len(s.stack) == 0 && seen {
				return s.fail(i, "not valid JSON")
			}
			seen = true
			s.stack = append(s.stack, jsonFrame{array: c == '[', raw: s.valueRaw(), wantKey: c == '{'})
			if len(s.stack) > maxJSONDepth {
				s.stack = s.stack[:1] // the path names where the nesting starts
				return s.fail(i, fmt.Sprintf("nested deeper than %d levels", maxJSONDepth))
			}
			i++
		default:
			if len(s.stack) == 0 && seen {
				return s.fail(i, "not valid JSON")
			}
			seen = true
			j := i
			for j < len(b) && strings.IndexByte("+-.0123456789eEtruefalsn", b[j]) >= 0 {
				j++
			}
			if j == i {
				return s.fail(i, "not valid JSON")
			}
			if !s.number(b[i:j]) {
				return s.fail(i, fmt.Sprintf("number %.40s is beyond a double's range (about 1.8e308)", b[i:j]))
			}
			i = j
		}
	}
	if len(s.stack) > 0 {
		return s.fail(len(b), "not valid JSON")
	}
	return true
}

// valueRaw tells whether the value starting now is raw JSON.
func (s *jsonScan) valueRaw() bool {
	d := len(s.stack)
	if d == 0 {
		return false
	}
	if s.stack[d-1].raw {
		return true
	}
	if !s.event || d > rawDepth {
		return false
	}
	path := s.keys[:d]
	for i := range path {
		if s.stack[i].array {
			return false // raw JSON is only named by object keys
		}
	}
	return rawEventJSON(path)
}

// number tells whether a number token fits a double. Only a number with an
// exponent or of more than 300 characters can overflow one.
func (s *jsonScan) number(tok []byte) bool {
	if tok[0] != '-' && (tok[0] < '0' || tok[0] > '9') {
		return true // a literal (true, false, null) or not JSON: not ours to judge
	}
	if len(tok) <= 300 && bytes.IndexAny(tok, "eE") < 0 {
		return true
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	return err == nil || !math.IsInf(f, 0)
}

// str scans the string starting with the quote at i; it returns the index
// after its closing quote.
func (s *jsonScan) str(i int, raw bool) (int, bool) {
	b := s.b
	stop := &stopInString
	if !s.validUTF8 {
		stop = &stopNonASCII
	}
	for j := i + 1; j < len(b); {
		c := b[j]
		if !stop[c] {
			j++
			continue
		}
		switch {
		case c == '"':
			return j + 1, true
		case c == 0:
			return 0, s.fail(j, "contains NUL")
		case c < 0x20:
			return 0, s.fail(j, "not valid JSON (raw control character)")
		case c >= 0x80:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n <= 1 {
				return 0, s.fail(j, "not valid UTF-8")
			}
			j += n
		default: // backslash
			if j+1 >= len(b) {
				return 0, s.fail(j, "not valid JSON")
			}
			if b[j+1] != 'u' {
				j += 2
				continue
			}
			r, ok := hex4(b, j+2)
			switch {
			case !ok:
				return 0, s.fail(j, "not valid JSON")
			case r == 0:
				return 0, s.fail(j, "contains NUL")
			case r == utf8.RuneError && !raw:
				return 0, s.fail(j, "not valid UTF-8")
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, s.fail(j, "unpaired UTF-16 surrogate escape")
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), j+7 < len(b) && b[j+6] == '\\' && b[j+7] == 'u'
				if ok {
					lo, ok = hex4(b, j+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return 0, s.fail(j, "unpaired UTF-16 surrogate escape")
				}
				j += 12
			default:
				j += 6
			}
		}
	}
	return 0, s.fail(len(b), "not valid JSON")
}

// hex4 reads the 4 hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// path renders where the problem is: field, then .key (identifiers),
// ["key"] or [index] per level. A problem in an object key names the object.
func (s *jsonScan) path(field string) string {
	var p strings.Builder
	p.WriteString(field)
	frames := s.stack
	if s.inKey {
		frames = frames[:len(frames)-1]
	}
	for _, f := range frames {
		if f.array {
			fmt.Fprintf(&p, "[%d]", f.index)
			continue
		}
		if f.key[1] == 0 {
			continue // an object before its first key
		}
		var k string
		if json.Unmarshal(s.b[f.key[0]:f.key[1]], &k) != nil {
			k = string(s.b[f.key[0]+1 : f.key[1]-1])
		}
		p.WriteString(eventjson.PathKey(k))
	}
	if s.inKey {
		p.WriteString(" (object key)")
	}
	return p.String()
}
