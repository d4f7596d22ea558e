package cache_test

import (
	"strings"
	"testing"

	"github.com/adksession/adksession/cache"
)

// FuzzEscape: Escape leaves no byte that would make a key ambiguous or move
// its hash slot, and Unescape undoes it (so Escape is injective). Unescape
// never panics on anything.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "app", "a:b", "{1}", "100%", "%25", "%", "%4", "%zz", "a b\n\x00\x7f", "é\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := cache.Escape(s)
		for i := 0; i < len(e); i++ {
			if c := e[i]; c <= ' ' || c == 0x7f || c == ':' || c == '{' || c == '}' {
				t.Fatalf("Escape(%q) = %q keeps byte %#x", s, e, c)
			}
		}
		back, err := cache.Unescape(e)
		if err != nil || back != s {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", s, back, err)
		}
		if !strings.ContainsAny(s, "%:{} \x7f") && strings.IndexFunc(s, func(r rune) bool { return r < ' ' }) < 0 && e != s {
			t.Fatalf("Escape(%q) = %q changed a plain id", s, e)
		}
		_, _ = cache.Unescape(s) // any input: an error, never a panic
	})
}

// FuzzKeysDistinct: the keys of two different sessions, users or apps never
// collide, whatever their ids hold, and each key of a session script shares
// one hash tag.
func FuzzKeysDistinct(f *testing.F) {
	f.Add("app", "user", "sid", "app", "user", "sid2")
	f.Add("a:b", "c", "d", "a", "b:c", "d")
	f.Add("a", "b:c", "d", "a", "b", "c:d")
	f.Add("a%3Ab", "c", "d", "a:b", "c", "d")
	f.Add("a}", "{b", "c", "a", "}{b", "c")
	f.Add("x", "", "y", "x", "y", "")
	k, err := cache.NewKeys("ns:", 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a1, u1, s1, a2, u2, s2 string) {
		k1, k2 := k.Session(a1, u1, s1), k.Session(a2, u2, s2)
		sameSession := a1 == a2 && u1 == u2 && s1 == s2
		sameUser := a1 == a2 && u1 == u2
		for _, c := range []struct {
			name         string
			x, y         string
			sameIdentity bool
		}{
			{"Session", k1.Session, k2.Session, sameSession},
			{"Events", k1.Events, k2.Events, sameSession},
			{"Temp", k1.Temp, k2.Temp, sameSession},
			{"Undo", k1.Undo, k2.Undo, sameSession},
			{"User", k1.User, k2.User, sameUser},
			{"UserIndex", k1.UserIndex, k2.UserIndex, sameUser},
			{"AppIndex", k1.AppIndex, k2.AppIndex, a1 == a2 && k1.Shard == k2.Shard},
			{"App.State", k.App(a1).State, k.App(a2).State, a1 == a2},
			{"EventIDs", k1.EventIDs, k2.EventIDs, sameSession},
			{"AppIndexMember", cache.AppIndexMember(u1, s1), cache.AppIndexMember(u2, s2), u1 == u2 && s1 == s2},
		} {
			if c.name == "AppIndexMember" && strings.Contains(u1+s1+u2+s2, "\x00") {
				continue // members are made of valid ids, which hold no NUL (the service refuses them)
			}
			if (c.x == c.y) != c.sameIdentity {
				t.Fatalf("%s: %q and %q, for (%q, %q, %q) and (%q, %q, %q)", c.name, c.x, c.y, a1, u1, s1, a2, u2, s2)
			}
		}
		tag := k1.Session[:strings.IndexByte(k1.Session, '}')+1]
		for _, key := range []string{k1.Events, k1.Temp, k1.Undo, k1.EventIDs, k1.User, k1.UserIndex, k1.AppIndex, k1.Log} {
			if !strings.HasPrefix(key, tag) || strings.Count(key, "{") != 1 || strings.Count(key, "}") != 1 {
				t.Fatalf("key %q: not in hash tag %q alone", key, tag)
			}
		}
	})
}
