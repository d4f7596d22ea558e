package persist

import (
	"fmt"
	"strconv"
	"strings"
)

// CheckAPIKeys finds the first key of an event in API form (valid JSON)
// that the database would give back as another key: a field of one of
// ADK's models written under its storage (snake_case) name, or, in a model
// whose other keys the storage form renames (google-genai's), a key that
// is not camelCase (camel(snake(k)) != k, say "my_key" or "Text"), or a
// key twice in one object of those models (the storage form keeps one).
// ADK Python would refuse them. A top-level key with an underscore is refused
// too: IsStorageForm would take the event for its storage form. It returns
// the key's JSON path (`.content.parts[0].my_key`) and false, or "" and
// true. Only the objects of ADK's models are read: the application's maps
// (args, state delta, custom metadata, ...) are kept as given.
func CheckAPIKeys(api []byte) (path string, ok bool) {
	return eventModel.checkKeys(api)
}

// checkKeys checks the members of an object of model m; a failure returns
// the path below v, built only then.
func (m *model) checkKeys(v []byte) (string, bool) {
	ms, ok := objectMembers(v)
	if !ok {
		return "", true
	}
	var seen map[string]bool // only for objects of many members
	if len(ms) > 8 {
		seen = make(map[string]bool, len(ms))
	}
	for i, mb := range ms {
		f := m.keys[mb.key]
		dup := seen[mb.key] || seen == nil && memberIndex(ms[:i], mb.key) >= 0 // the storage form keeps one
		switch {
		case f == nil && m.extra == renameExtra && !keptByRename(mb.key), f != nil && mb.key != f.api, dup,
			m == eventModel && strings.Contains(mb.key, "_"):
			return pathKey(mb.key), false
		}
		if seen != nil {
			seen[mb.key] = true
		}
		if f != nil {
			if p, ok := f.checkKeys(mb.val); !ok {
				return pathKey(mb.key) + p, false
			}
		}
	}
	return "", true
}

func (f *field) checkKeys(v []byte) (string, bool) {
	switch f.kind {
	case kindModel:
		return f.model.checkKeys(v)
	case kindModelList:
		elems, _ := arrayElements(v)
		for i, e := range elems {
			if p, ok := f.model.checkKeys(e); !ok {
				return "[" + strconv.Itoa(i) + "]" + p, false
			}
		}
	case kindModelMap:
		ms, _ := objectMembers(v)
		for _, mb := range ms {
			if p, ok := f.model.checkKeys(mb.val); !ok {
				return fmt.Sprintf("[%q]", mb.key) + p, false
			}
		}
	}
	return "", true
}

// keptByRename tells whether a key the storage form renames comes back as
// it is.
func keptByRename(k string) bool {
	return alreadyCamel(k) || camel(snake(k)) == k
}

// pathKey is .k for a plain key, ["k"] otherwise.
func pathKey(k string) string {
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
