package integration

// The import arrows between the module's packages are the ones
// docs/design.md ("Packages") draws, no more and no fewer: its graph is the
// list this test holds the build to.

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// endToEndHop is a file:function hop of docs/design.md's "An append, end to
// end": a Go file of the module and a function of it, Recv.Name for a
// method.
var endToEndHop = regexp.MustCompile("`([a-z/]+\\.go):((?:[A-Za-z]+\\.)?[A-Za-z]+)`")

// TestEndToEndMapNamesCode: every file:function hop of docs/design.md's
// "An append, end to end" (and its cold read) names a function that file
// declares, so the map follows the code it maps.
func TestEndToEndMapNamesCode(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(doc[bytes.Index(doc, []byte("## An append, end to end")):]), "\n## API")
	hops := endToEndHop.FindAllStringSubmatch(section, -1)
	if len(hops) < 20 {
		t.Fatalf("docs/design.md's end-to-end map names %d file:function hops, want its 20 or more", len(hops))
	}
	declared := map[string]map[string]bool{}
	for _, h := range hops {
		file, fn := h[1], h[2]
		if declared[file] == nil {
			declared[file] = funcsOf(t, filepath.Join(root, file))
		}
		if !declared[file][fn] {
			t.Errorf("docs/design.md's end-to-end map: %s declares no %s", file, fn)
		}
	}
}

// funcsOf returns the functions a Go file declares: Name, and Recv.Name for
// methods (the receiver's type without its pointer).
func funcsOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(gotoken.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			typ := fd.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				name = id.Name + "." + name
			}
		}
		out[name] = true
	}
	return out
}
