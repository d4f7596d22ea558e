package eventjson

import (
	"bytes"
	"encoding/json"
)

// member is one member of a JSON object: its key (unescaped) and its value
// (the bytes as given, no surrounding space).
type member struct {
	key string
	val []byte
}

// objectMembers returns the members of data, a valid JSON value, in order;
// ok is false when it is not an object.
func objectMembers(data []byte) (out []member, ok bool) {
	ok = eachItem(data, '{', func(key, val []byte) {
		if out == nil {
			out = make([]member, 0, 8)
		}
		out = append(out, member{unquote(key), val})
	})
	return out, ok
}

// arrayElements returns the elements of data, a valid JSON value; ok is
// false when it is not an array.
func arrayElements(data []byte) (out [][]byte, ok bool) {
	ok = eachItem(data, '[', func(_, val []byte) { out = append(out, val) })
	return out, ok
}

// eachItem calls fn with each member (open '{') or element (open '[') of
// data, a valid JSON value; it reports false when data is not of that kind.
func eachItem(data []byte, open byte, fn func(key, val []byte)) bool {
	it, ok := startItems(data, open)
	if !ok {
		return false
	}
	for key, val, more := it.next(); more; key, val, more = it.next() {
		fn(key, val)
	}
	return true
}

// items walks the members or elements of a JSON object or array.
type items struct {
	data []byte
	i    int  // the next item, its ',' or the closing byte
	open byte // '{' or '['
}

// startItems starts a walk of data, a valid JSON value; ok is false when it
// is not of the kind open ('{' or '[').
func startItems(data []byte, open byte) (it items, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != open {
		return items{}, false
	}
	return items{data: data, i: skipSpace(data, i+1), open: open}, true
}

// next returns the next member's key token (nil for an array) and value,
// with more false past the last.
func (it *items) next() (key, val []byte, more bool) {
	d, i := it.data, it.i
	if d[i] == it.open+2 { // '}' and ']' follow '{' and '[' by 2
		return nil, nil, false
	}
	if d[i] == ',' {
		i = skipSpace(d, i+1)
	}
	if it.open == '{' {
		keyEnd := stringEnd(d, i)
		key = d[i:keyEnd]
		i = skipSpace(d, skipSpace(d, keyEnd)+1) // past the ':'
	}
	end := valueEnd(d, i)
	it.i = skipSpace(d, end)
	return key, d[i:end], true
}

// unquote returns the string of a valid JSON string token. The keys of
// the models' fields come from one table, not a new string each.
func unquote(tok []byte) string {
	if bytes.IndexByte(tok, '\\') < 0 {
		if s, ok := knownKeys[string(tok[1:len(tok)-1])]; ok {
			return s
		}
		return string(tok[1 : len(tok)-1])
	}
	var s string
	json.Unmarshal(tok, &s) // tok is a valid JSON string
	return s
}

// writeObject writes members as a JSON object, keys without HTML escaping.
func writeObject(ms []member) []byte {
	n := 2
	for _, m := range ms {
		n += len(m.key) + len(m.val) + 4
	}
	out := make([]byte, 1, n)
	out[0] = '{'
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		out = AppendString(out, m.key, false)
		out = append(out, ':')
		out = append(out, m.val...)
	}
	return append(out, '}')
}

// writeArray writes elements as a JSON array.
func writeArray(elems [][]byte) []byte {
	out := []byte{'['}
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// memberIndex returns the index of the member named key, or -1.
func memberIndex(ms []member, key string) int {
	for i, m := range ms {
		if m.key == key {
			return i
		}
	}
	return -1
}

func isNull(v []byte) bool { return string(v) == "null" }

func isJSONString(v []byte) bool { return len(v) >= 2 && v[0] == '"' }
