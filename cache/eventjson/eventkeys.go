package eventjson

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
)

// KeyProblem is what CheckAPI says of a key the database would give back
// as another.
const KeyProblem = "a key the database would give back as another: keys of ADK's models are their camelCase API " +
	"names (the database holds ADK's snake_case storage form)"

// CheckAPI finds the first value of an event in API form (valid JSON) that
// the database, or a reader of it, would not give back as it is, and says
// why (problem; "" when there is none):
//
//   - a key of one of ADK's models written under its storage (snake_case)
//     name, or, in a model whose other keys the storage form renames
//     (google-genai's), a key that is not camelCase (camel(snake(k)) != k,
//     say "my_key" or "Text"), or a key twice in one object of those
//     models (the storage form keeps one): KeyProblem. ADK Python would
//     refuse them. A top-level key with an underscore is refused too:
//     IsStorageForm would take the event for its storage form;
//   - a value of a bytes field (inline data, thought signatures, ...) that
//     is not base64 every reader decodes (BytesProblem).
//
// path is the value's JSON path (`.content.parts[0].my_key`). Only the
// objects of ADK's models are read: the application's maps (args, state
// delta, custom metadata, ...) are kept as given.
func CheckAPI(api []byte) (path, problem string) {
	return eventModel.checkKeys(api)
}

// checkKeys checks the members of an object of model m; a failure returns
// the path below v, built only then. It runs on every event appended, so it
// reads the members in place: no slice of them, no string of a key without
// escapes.
func (m *model) checkKeys(v []byte) (path, problem string) {
	var small [8][]byte
	seen := small[:0]        // the keys so far, unescaped
	var many map[string]bool // instead of seen, in an object of many members
	eachItem(v, '{', func(tok, val []byte) {
		if problem != "" {
			return
		}
		key := tok[1 : len(tok)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(unquote(tok))
		}
		var dup bool // the storage form keeps one
		switch {
		case many != nil:
			dup = many[string(key)]
			many[string(key)] = true
		case len(seen) == cap(small):
			many = make(map[string]bool, 2*len(seen))
			for _, k := range seen {
				many[string(k)] = true
			}
			dup = many[string(key)]
			many[string(key)] = true
		default:
			dup = slices.ContainsFunc(seen, func(k []byte) bool { return bytes.Equal(k, key) })
			seen = append(seen, key)
		}
		f := m.keys[string(key)]
		switch {
		case f == nil && m.extra == renameExtra && !keptByRename(string(key)), f != nil && string(key) != f.api, dup,
			m == eventModel && bytes.IndexByte(key, '_') >= 0:
			path, problem = PathKey(string(key)), KeyProblem
			return
		}
		if f != nil {
			if p, why := f.checkKeys(val); why != "" {
				path, problem = PathKey(string(key))+p, why
			}
		}
	})
	return path, problem
}

func (f *field) checkKeys(v []byte) (string, string) {
	switch f.kind {
	case kindBytes:
		return "", BytesProblem(v)
	case kindModel:
		return f.model.checkKeys(v)
	case kindModelList:
		elems, _ := arrayElements(v)
		for i, e := range elems {
			if p, why := f.model.checkKeys(e); why != "" {
				return "[" + strconv.Itoa(i) + "]" + p, why
			}
		}
	case kindModelMap:
		ms, _ := objectMembers(v)
		for _, mb := range ms {
			if p, why := f.model.checkKeys(mb.val); why != "" {
				return fmt.Sprintf("[%q]", mb.key) + p, why
			}
		}
	}
	return "", ""
}

// keptByRename tells whether a key the storage form renames comes back as
// it is.
func keptByRename(k string) bool {
	return alreadyCamel(k) || camel(snake(k)) == k
}
