package projector_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fold must stay pure (DESIGN.md §5): no NATS, no network, no OS, no
// randomness anywhere below it, and no clock reads in its own code or in the
// wire schema it decodes with.
func TestPurity(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/maknow/tenure/projector").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list returned too little: %q", deps)
	}
	for _, dep := range deps {
		switch {
		case strings.HasPrefix(dep, "github.com/nats-io/"),
			dep == "net" || strings.HasPrefix(dep, "net/"),
			dep == "math/rand" || dep == "math/rand/v2" || dep == "crypto/rand":
			t.Errorf("projector depends on forbidden package %s", dep)
		}
	}
	for _, dir := range []string{".", "../events", "../cron"} {
		checkSource(t, dir)
	}
}

var forbiddenImports = map[string]bool{"os": true, "net": true, "math/rand": true, "math/rand/v2": true, "crypto/rand": true, "unsafe": true}

var forbiddenTimeCalls = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true,
	"Tick": true, "NewTimer": true, "NewTicker": true,
	// The host's time zone database and zone: a replay elsewhere would
	// read another (package cron carries zones as rules).
	"LoadLocation": true, "Local": true,
}

// checkSource parses the non-test files of dir and rejects forbidden imports
// and clock reads.
func checkSource(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		timeName := ""
		for _, imp := range file.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if forbiddenImports[path] || strings.HasPrefix(path, "github.com/nats-io/") || strings.HasPrefix(path, "net/") {
				t.Errorf("%s imports %s", f, path)
			}
			if path == "time" {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		if timeName == "" {
			continue
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && forbiddenTimeCalls[sel.Sel.Name] {
				t.Errorf("%s: uses time.%s", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
