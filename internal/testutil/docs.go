package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RequireDocs fails t unless the Go package in dir (its non-test files) has a
// package doc comment and every exported top-level identifier has a doc
// comment: functions, methods of exported types, types, and constants and
// variables (a comment on their group counts).
func RequireDocs(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("testutil: read %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	hasPkgDoc := false
	files := 0
	for _, ent := range ents {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("testutil: parse: %v", err)
		}
		files++
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			hasPkgDoc = true
		}
		for _, decl := range f.Decls {
			for _, pos := range undocumented(decl) {
				t.Errorf("%s: exported %s has no doc comment", fset.Position(pos.at), pos.name)
			}
		}
	}
	if files == 0 {
		t.Fatalf("testutil: no Go files in %s", dir)
	}
	if !hasPkgDoc {
		t.Errorf("package in %s has no package doc comment", dir)
	}
}

type named struct {
	name string
	at   token.Pos
}

func undocumented(decl ast.Decl) []named {
	var out []named
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Doc != nil {
			return nil
		}
		if d.Recv != nil && len(d.Recv.List) > 0 && !ast.IsExported(recvType(d.Recv.List[0].Type)) {
			return nil
		}
		out = append(out, named{d.Name.Name, d.Pos()})
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
					out = append(out, named{s.Name.Name, s.Pos()})
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() && s.Doc == nil && d.Doc == nil {
						out = append(out, named{n.Name, n.Pos()})
					}
				}
			}
		}
	}
	return out
}

func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
