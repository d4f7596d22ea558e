package integration

// The import arrows between the module's packages are the ones
// docs/design.md ("Packages") draws, no more and no fewer: its graph is the
// list this test holds the build to.

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/adksession/adksession"

func TestImportArrows(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := designGraph(doc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`, modulePath+"/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := listGraph(out)
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		if d, ok := want[pkg]; !ok {
			t.Errorf("package %s is not in docs/design.md's import graph (it imports %q)", pkg, got[pkg])
		} else {
			for _, imp := range got[pkg] {
				if !slices.Contains(d, imp) {
					t.Errorf("%s imports %s: an arrow docs/design.md's import graph does not draw", pkg, imp)
				}
			}
			for _, imp := range d {
				if !slices.Contains(got[pkg], imp) {
					t.Errorf("docs/design.md's import graph has %s import %s: it does not", pkg, imp)
				}
			}
		}
	}
	for pkg := range want {
		if _, ok := got[pkg]; !ok {
			t.Errorf("docs/design.md's import graph names %s: no such package", pkg)
		}
	}
}

// listGraph reads go list's "pkg: imp imp" lines: the module's packages
// other than the tests' own (integration/...) and the module's imports of
// each, as paths inside the module.
func listGraph(out []byte) map[string][]string {
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pkg, imps, _ := strings.Cut(sc.Text(), ":")
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, modulePath), "/")
		if pkg == "integration" || strings.HasPrefix(pkg, "integration/") {
			continue
		}
		g[pkg] = []string{}
		for _, imp := range strings.Fields(imps) {
			if rest, ok := strings.CutPrefix(imp, modulePath+"/"); ok {
				g[pkg] = append(g[pkg], rest)
			}
		}
	}
	return g
}

// designGraph reads the code block after "The import graph" in design.md:
// one "pkg: imp imp" line per package, a remark in parentheses after it.
func designGraph(doc []byte) (map[string][]string, error) {
	_, rest, ok := bytes.Cut(doc, []byte("The import graph"))
	if !ok {
		return nil, errNoGraph
	}
	_, rest, ok = bytes.Cut(rest, []byte("```\n"))
	if !ok {
		return nil, errNoGraph
	}
	block, _, ok := bytes.Cut(rest, []byte("```"))
	if !ok {
		return nil, errNoGraph
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(block)), "\n") {
		line, _, _ = strings.Cut(line, "(")
		pkg, imps, ok := strings.Cut(line, ":")
		if !ok {
			return nil, errNoGraph
		}
		g[strings.TrimSpace(pkg)] = strings.Fields(imps)
	}
	return g, nil
}

type graphError string

func (e graphError) Error() string { return string(e) }

const errNoGraph = graphError(`docs/design.md: no "The import graph" code block of "pkg: imports" lines`)
