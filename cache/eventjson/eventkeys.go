package eventjson

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
)

// keyProblem is what CheckAPI says of a key the database would give back
// as another.
const keyProblem = "a key the database would give back as another: keys of ADK's models are their camelCase API " +
	"names (the database holds ADK's snake_case storage form)"

// CheckAPI finds the first value of an event in API form (valid JSON) that
// the database, or a reader of it, would not give back as it is, and says
// why (problem; "" when there is none):
//
//   - a key of one of ADK's models written under its storage (snake_case)
//     name, or, in a model whose other keys the storage form renames
//     (google-genai's), a key that is not camelCase (camel(snake(k)) != k,
//     say "my_key" or "Text"), or a key twice in one object of those
//     models (the storage form keeps one): keyProblem. ADK Python would
//     refuse them. A top-level key with an underscore is refused too:
//     IsStorageForm would take the event for its storage form;
//   - a value of a bytes field (inline data, thought signatures, ...) that
//     is not base64 every reader decodes (bytesProblem);
//   - a value of a model field that is not an object (or null), of a list
//     of them that is not a list (or null) of objects, of a map of them
//     that is not an object (or null) of objects: shapeProblem (the list
//     itself: listProblem). ADK Python
//     would refuse the event, and the database's call-id indexes read a
//     part as an object.
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
			path, problem = PathKey(string(key)), keyProblem
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

// shapeProblem and listProblem are what CheckAPI says of a value of one of
// ADK's models that is no object, of a list of them that is no list.
const (
	shapeProblem = "not an object: a value of one of ADK's models is one (or null for none); ADK Python would refuse it"
	listProblem  = "not a list: a list of ADK's models is one, of objects (or null for none); ADK Python would refuse it"
)

func (f *field) checkKeys(v []byte) (string, string) {
	if f.kind >= kindModel && f.kind <= kindModelMap && isNull(v) {
		return "", ""
	}
	switch f.kind {
	case kindBytes:
		return "", bytesProblem(v)
	case kindModel:
		if !isObject(v) {
			return "", shapeProblem
		}
		return f.model.checkKeys(v)
	case kindModelList:
		elems, ok := arrayElements(v)
		if !ok {
			return "", listProblem
		}
		for i, e := range elems {
			p, why := "", shapeProblem
			if isObject(e) {
				p, why = f.model.checkKeys(e)
			}
			if why != "" {
				return "[" + strconv.Itoa(i) + "]" + p, why
			}
		}
	case kindModelMap:
		ms, ok := objectMembers(v)
		if !ok {
			return "", shapeProblem
		}
		for _, mb := range ms {
			p, why := "", shapeProblem
			if isObject(mb.val) {
				p, why = f.model.checkKeys(mb.val)
			}
			if why != "" {
				return fmt.Sprintf("[%q]", mb.key) + p, why
			}
		}
	}
	return "", ""
}

// isObject tells whether v, a JSON value, is an object.
func isObject(v []byte) bool {
	i := skipSpace(v, 0)
	return i < len(v) && v[i] == '{'
}

// keptByRename tells whether a key the storage form renames comes back as
// it is.
func keptByRename(k string) bool {
	return alreadyCamel(k) || camel(snake(k)) == k
}
