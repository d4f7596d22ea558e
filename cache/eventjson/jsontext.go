package eventjson

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The module's one JSON string quoter, JSON path key and float-seconds time
// form: the service's event writer and validation messages use them as the
// conversions here do (docs/design.md, "Packages").

// AppendString appends s quoted as encoding/json writes a string: invalid
// UTF-8 as \ufffd, U+2028 and U+2029 escaped, and with escapeHTML (what
// json.Marshal does) <, > and & as \u003c, \u003e, \u0026; without it
// (an Encoder with SetEscapeHTML(false), and Python's json.dumps) as they are.
func AppendString(b []byte, s string, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// PathKey is key k as a step of a JSON path in an error message: .k for an
// ASCII identifier (a letter or _, then letters, digits and _), ["k"]
// otherwise.
func PathKey(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c == '_' || isAlnum(c)) || i == 0 && isDigit(c) {
			return fmt.Sprintf("[%q]", k)
		}
	}
	if k == "" {
		return `[""]`
	}
	return "." + k
}

// AppendSeconds appends us, a time in µs since the epoch, as seconds with
// exactly six decimals (ADK's float timestamp): 1700000000.000123; before
// the epoch, -1.500000.
func AppendSeconds(out []byte, us int64) []byte {
	if us < 0 {
		out, us = append(out, '-'), -us
	}
	out = append(strconv.AppendInt(out, us/1e6, 10), '.')
	var frac [6]byte // the microseconds, zero-padded
	for i, n := 5, us%1e6; i >= 0; i, n = i-1, n/10 {
		frac[i] = byte('0' + n%10)
	}
	return append(out, frac[:]...)
}
