package cache

import (
	"bytes"
	"errors"
)

// timestampKey starts the top-level "timestamp" of an event's JSON. Only
// plain strings (id, invocationId, author, branch) precede it in the API
// form the service writes, and a JSON string cannot hold `,"` unescaped, so
// its first occurrence is the top-level key.
var timestampKey = []byte(`,"timestamp":`)

// SplitTimestamp cuts an event's JSON around the value of its top-level
// "timestamp": append.lua and rewind.lua write the time they store between
// the two parts, so a time moved after the previous event's is in the JSON
// too.
func SplitTimestamp(blob []byte) (pre, post string, err error) {
	i := bytes.Index(blob, timestampKey)
	if i < 0 {
		return "", "", errors.New("event JSON has no top-level timestamp")
	}
	i += len(timestampKey)
	j := bytes.IndexAny(blob[i:], ",}")
	if j < 0 {
		return "", "", errors.New("event JSON: unterminated timestamp")
	}
	all := string(blob) // one copy for both parts
	return all[:i], all[i+j:], nil
}
