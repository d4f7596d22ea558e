package base

import "testing"

// The change kinds: the scripts' field k, read back, and named for operators (dead letters).
func TestChangeKind(t *testing.T) {
	for _, c := range []struct {
		k    string
		want ChangeKind
		ok   bool
		name string
	}{
		{"c", ChangeCreate, true, "create"},
		{"a", ChangeAppend, true, "append"},
		{"d", ChangeDelete, true, "delete"},
		{"x", 0, false, ""},
		{"", 0, false, ""},
		{"ca", 0, false, ""},
	} {
		got, ok := ParseChangeKind(c.k)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseChangeKind(%q) = %q, %v; want %q, %v", c.k, got, ok, c.want, c.ok)
		}
		if ok && got.String() != c.name {
			t.Errorf("%q.String() = %q, want %q", c.k, got.String(), c.name)
		}
	}
}

func TestStateOwner(t *testing.T) {
	if o := (StateOwner{App: "a", User: "u"}); o.IsApp() || o.String() != "user u of app a" {
		t.Errorf("user owner: IsApp %v, String %q", o.IsApp(), o.String())
	}
	if o := (StateOwner{App: "a"}); !o.IsApp() || o.String() != "app a" {
		t.Errorf("app owner: IsApp %v, String %q", o.IsApp(), o.String())
	}
}
