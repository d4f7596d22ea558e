package lua

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScriptsGetTheirHelpers: every script gets in front of it the helpers
// its code names, and those the helpers it gets name, each before its first
// use; and no helper it does not name (each costs every call).
func TestScriptsGetTheirHelpers(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) < 20 {
		t.Fatalf("scripts: %v, %v", files, err)
	}
	for _, f := range files {
		if f == "lib.lua" || f == "index.lua" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		script := withLib(string(src))
		at := map[string]int{} // helper name -> where the script defines it
		for _, d := range helpers {
			if i := strings.Index(script, d.text); i >= 0 {
				for _, n := range d.names {
					at[n] = i
				}
			}
		}
		// Each helper the script has, and the script itself, names only
		// helpers defined before it.
		parts := map[string]int{string(src): len(script)}
		for _, d := range helpers {
			if i, ok := at[d.names[0]]; ok {
				parts[d.text] = i
			}
		}
		for text, from := range parts {
			for n := range identifiers(text) {
				i, ok := at[n]
				if !ok && isHelper(n) {
					t.Errorf("%s names helper %s, which it lacks", f, n)
				}
				if ok && i > from {
					t.Errorf("%s names helper %s before its definition", f, n)
				}
			}
		}
		for _, d := range helpers {
			if _, ok := at[d.names[0]]; ok && !namedBy(d.names, string(src), parts) {
				t.Errorf("%s has helper %s, which nothing in it names", f, d.names[0])
			}
		}
	}
	// append.lua, the hot path, has none of the helpers of reads and rewinds.
	for _, n := range []string{"undo_walk", "undo_read", "guard_moved", "new_session_check", "index_fetch"} {
		if strings.Contains(Append, "local function "+n+"(") {
			t.Errorf("Append has %s", n)
		}
	}
}

func isHelper(name string) bool {
	for _, d := range helpers {
		for _, n := range d.names {
			if n == name {
				return true
			}
		}
	}
	return false
}

// namedBy: one of names is named by the script's own code or by another
// part of it.
func namedBy(names []string, src string, parts map[string]int) bool {
	for text := range parts {
		if strings.Contains(text, "local function "+names[0]) || strings.HasPrefix(strings.TrimLeft(text, "-\n "), "local "+names[0]) {
			continue
		}
		ids := identifiers(text)
		for _, n := range names {
			if ids[n] {
				return true
			}
		}
	}
	return false
}
