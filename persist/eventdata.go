package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// storageEventData returns data, a JSON object, with its top-level "id",
// "invocation_id" and "timestamp" set to the column values, the timestamp in
// epoch milliseconds (what ADK JS reads). Every other member keeps its
// position and its bytes; the three are replaced where they are, or appended
// in that order when missing.
func storageEventData(data []byte, id, invocationID string, ts time.Time) ([]byte, error) {
	set := map[string][]byte{
		"id":            jsonString(id),
		"invocation_id": jsonString(invocationID),
		"timestamp":     epochMillis(ts),
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("event data is not a JSON object")
	}
	out := make([]byte, 0, len(data)+64)
	out = append(out, '{')
	seen := make(map[string]bool, len(set))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("event data: %w", err)
		}
		key := tok.(string) // object keys are always strings
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("event data member %q: %w", key, err)
		}
		if v, ok := set[key]; ok {
			val, seen[key] = v, true
		}
		out = appendMember(out, key, val)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("event data: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("event data: trailing data after the object")
	}
	for _, key := range []string{"id", "invocation_id", "timestamp"} {
		if !seen[key] {
			out = appendMember(out, key, set[key])
		}
	}
	return append(out, '}'), nil
}

func appendMember(out []byte, key string, val []byte) []byte {
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(out, jsonString(key)...)
	out = append(out, ':')
	return append(out, val...)
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

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
