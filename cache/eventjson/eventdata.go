package eventjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// WithColumns returns data, a JSON object, with its top-level "id",
// "invocation_id" and "timestamp" set to the column values, the timestamp in
// epoch milliseconds (what ADK JS reads). Every other member keeps its
// position and its bytes, key and value; the three are replaced where they
// are, or appended in that order when missing.
func WithColumns(data []byte, id, invocationID string, ts time.Time) ([]byte, error) {
	if !json.Valid(data) {
		return nil, errors.New("event data is not valid JSON")
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, errors.New("event data is not a JSON object")
	}
	set := [...][]byte{jsonString(id), jsonString(invocationID), epochMillis(ts)}
	var seen [len(set)]bool
	out := make([]byte, 0, len(data)+64)
	out = append(out, '{')
	// data is valid JSON, so the scan below needs no error checks.
	for i = skipSpace(data, i+1); data[i] != '}'; i = skipSpace(data, i) {
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		keyEnd := stringEnd(data, i)
		key := data[i:keyEnd]
		i = skipSpace(data, skipSpace(data, keyEnd)+1) // past the ':'
		valEnd := valueEnd(data, i)
		val := data[i:valEnd]
		i = valEnd
		if k := columnMember(key); k >= 0 {
			val, seen[k] = set[k], true
		}
		out = appendMember(out, key, val)
	}
	for k, name := range columnMembers {
		if !seen[k] {
			out = appendMember(out, jsonString(name), set[k])
		}
	}
	return append(out, '}'), nil
}

// columnMembers are the members of event_data that repeat a column.
var columnMembers = [...]string{"id", "invocation_id", "timestamp"}

// columnMember returns the index in columnMembers of the quoted key, or -1.
func columnMember(key []byte) int {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		json.Unmarshal(key, &s) // key is a valid JSON string
		name = []byte(s)
	}
	for k, m := range columnMembers {
		if string(name) == m {
			return k
		}
	}
	return -1
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at i
// (data is valid JSON): the first quote after it that an even number of
// backslashes precedes, found by bytes.IndexByte.
func stringEnd(data []byte, i int) int {
	for i++; ; {
		q := i + bytes.IndexByte(data[i:], '"')
		if q < i {
			panic("eventjson: unterminated string in JSON taken for valid")
		}
		n := 0
		for k := q - 1; k >= i && data[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// valueEnd returns the index just past the JSON value starting at i.
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for {
			switch data[i] {
			case '"':
				i = stringEnd(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for ; i < len(data); i++ { // a number, true, false or null
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

func appendMember(out, key, val []byte) []byte {
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, key...)
	out = append(out, ':')
	return append(out, val...)
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte { return AppendString(make([]byte, 0, len(s)+2), s, false) }

// epochMillis formats t as epoch milliseconds, with up to three fractional
// digits so that microseconds survive: 1700000000123.456.
func epochMillis(t time.Time) []byte {
	us := t.UnixMicro()
	var out []byte
	if us < 0 {
		out, us = append(out, '-'), -us
	}
	out = strconv.AppendInt(out, us/1000, 10)
	if frac := us % 1000; frac != 0 {
		digits := []byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		out = append(out, bytes.TrimRight(digits, "0")...)
	}
	return out
}
