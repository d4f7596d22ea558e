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
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := designGraph(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := listGraph(goList(t, root, `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`))
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

// benchPackage holds the benchmark helpers (docs/design.md, "Benchmark code
// and cmd").
const benchPackage = "cache/scriptbench"

// TestBenchNotInProduction: no production package (the module's packages
// but the commands, the tests' own and the benchmark package itself)
// imports the benchmark package, directly or through another.
func TestBenchNotInProduction(t *testing.T) {
	root := moduleRoot(t)
	deps := listGraph(goList(t, root, `{{.ImportPath}}:{{range .Deps}} {{.}}{{end}}`))
	if _, ok := deps[benchPackage]; !ok {
		t.Fatalf("no package %s", benchPackage)
	}
	for _, pkg := range slices.Sorted(maps.Keys(deps)) {
		if pkg == benchPackage || pkg == "cmd" || strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		if slices.Contains(deps[pkg], benchPackage) {
			t.Errorf("production package %s imports the benchmark package %s (directly or through another)", pkg, benchPackage)
		}
	}
}

// TestCmdWiringOnly: the command imports the public packages and its own
// internal ones, none of the building blocks below service.
func TestCmdWiringOnly(t *testing.T) {
	const cmdPkg = "cmd/adksession"
	imps, ok := listGraph(goList(t, moduleRoot(t), `{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}`))[cmdPkg]
	if !ok {
		t.Fatalf("no package %s", cmdPkg)
	}
	for _, imp := range imps {
		if imp != "service" && imp != "service/httpapi" && !strings.HasPrefix(imp, cmdPkg+"/internal/") {
			t.Errorf("%s imports %s: the command imports service, service/httpapi and its own internal packages only", cmdPkg, imp)
		}
	}
}

func moduleRoot(t *testing.T) string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// goList runs go list -f format over the module's packages in root.
func goList(t *testing.T, root, format string) []byte {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", format, modulePath+"/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return out
}

// listGraph reads go list's "pkg: imp imp" lines: the module's packages
// other than the tests' own (integration/...) and the module's packages
// each imports (or depends on), as paths inside the module.
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
