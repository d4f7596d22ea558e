package integration

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sessionByID is a format string that names a session by its id alone:
// "session %s" not followed by " of app" (base.SessionName's form) or by
// "/%" (app/user/id).
var sessionByID = regexp.MustCompile(`session %[sqv](?:[^/ ]|$| [^o]| o[^f]| of [^a])`)

// TestMessagesNameSessions: every message of the production packages names
// a session by app, user and id (base.SessionName, base.SessionRef), never
// by its id alone: ids repeat across apps and users.
func TestMessagesNameSessions(t *testing.T) {
	root := moduleRoot(t)
	fset := gotoken.NewFileSet()
	var checked int
	for _, dir := range []string{"cache", "persist", "loader", "service"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != gotoken.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				checked++
				if sessionByID.MatchString(s) {
					t.Errorf("%s: %q names a session by its id alone (use base.SessionName or a base.SessionRef)", fset.Position(lit.Pos()), s)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no string literals read")
	}
}

func TestSessionByIDPattern(t *testing.T) {
	for s, want := range map[string]bool{
		"get session %s: %w":               true,
		"load session %q":                  true,
		"session %s":                       true,
		"session %s of app %s, user %s":    false,
		"event %s of session %s/%s/%s: %s": false,
		"get %s: %w":                       false,
		"session %s on another":            true,
	} {
		if got := sessionByID.MatchString(s); got != want {
			t.Errorf("sessionByID(%q) = %v, want %v", s, got, want)
		}
	}
}
