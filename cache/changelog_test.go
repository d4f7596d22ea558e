package cache

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestParseChange(t *testing.T) {
	t.Parallel()
	id := map[string]any{"a": "app", "u": "u", "i": "s", "n": "1700000000000000"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range id {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name   string
		values map[string]any
		err    string // "" = parses
	}{
		{"create", with("k", "c"), ""},
		{"create with app delta", with("k", "c", "p", `{"x":1}`), ""},
		{"append", with("k", "a", "q", "3", "t", "1700000000000001"), ""},
		{"delete", with("k", "d"), ""},
		{"unknown kind", with("k", "z"), "unknown kind"},
		{"no kind", with(), "unknown kind"},
		{"no identity", with("k", "c", "u", nil), "missing session identity"},
		{"no incarnation", with("k", "d", "n", nil), "field n"},
		{"timestamp Lua wrote as a float", with("k", "a", "q", "3", "t", "2.534022144e+17"), `field t: "2.534022144e+17" is not an integer`},
		{"append without seq", with("k", "a", "t", "1"), "field q"},
		{"incarnation as a float", with("k", "c", "n", "1.7e+15"), "field n"},
		{"app delta not JSON", with("k", "a", "q", "3", "t", "1", "p", `{`), "field p"},
		{"app delta not an object", with("k", "a", "q", "3", "t", "1", "p", `[1]`), "field p"},
		{"create with user delta", with("k", "c", "w", `{"x":1}`), ""},
		{"user delta not JSON", with("k", "a", "q", "3", "t", "1", "w", `{`), "field w"},
		{"user delta not an object", with("k", "c", "w", `[1]`), "field w"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ch, err := parseChange(redis.XMessage{ID: "1-0", Values: c.values})
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("parseChange: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("parseChange: got %v, want an error with %q", err, c.err)
			case c.err == "" && (ch.App != "app" || ch.Incarnation != 1700000000000000):
				t.Fatalf("parseChange: %+v", ch)
			}
			if ch.EntryID != "1-0" || ch.Fields == nil {
				t.Fatalf("the change keeps its id and fields for the dead letter: %+v", ch)
			}
		})
	}
}
