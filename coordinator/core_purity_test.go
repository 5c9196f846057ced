package coordinator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// The core (core.go) stays without I/O: it imports no package that talks
// to the world, reads no clock, starts no goroutine, touches no channel,
// and takes from package streams only its pure types and names.
func TestCorePurity(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "core.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{
		"bytes": true, "errors": true, "fmt": true, "strings": true, "time": true,
		"github.com/maknow/tenure/events":    true,
		"github.com/maknow/tenure/projector": true,
		"github.com/maknow/tenure/streams":   true,
	}
	for _, imp := range file.Imports {
		if p := strings.Trim(imp.Path.Value, `"`); !allowed[p] {
			t.Errorf("core.go imports %s", p)
		}
	}
	fromStreams := map[string]bool{"Topology": true, "SnapshotAnchor": true, "HeaderStreamSource": true}
	clockReads := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true}
	ast.Inspect(file, func(n ast.Node) bool {
		pos := func() string { return fset.Position(n.Pos()).String() }
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: starts a goroutine", pos())
		case *ast.SelectStmt, *ast.SendStmt, *ast.ChanType:
			t.Errorf("%s: uses a channel", pos())
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				t.Errorf("%s: receives from a channel", pos())
			}
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				switch {
				case id.Name == "time" && clockReads[n.Sel.Name]:
					t.Errorf("%s: reads the clock (time.%s)", pos(), n.Sel.Name)
				case id.Name == "streams" && !fromStreams[n.Sel.Name]:
					t.Errorf("%s: uses streams.%s", pos(), n.Sel.Name)
				}
			}
		}
		return true
	})
}
