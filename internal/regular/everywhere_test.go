package regular_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// opensDirectories lists the files allowed to call os.Open itself, and
// why: they open directories (to sync them) or a file of the kernel's.
var opensDirectories = map[string]string{
	"checkpoint/swap.go":                "syncs a directory",
	"internal/atomicfile/atomicfile.go": "syncs a directory",
	"cmd/polysketch/bench.go":           "reads /proc/meminfo",
	"internal/regular/regular.go":       "is the helper",
}

// TestEveryOpenIsChecked makes sure that every file polysketch opens by
// name goes through this package: a call of os.Open, os.OpenFile or
// os.ReadFile anywhere else in the module (tests aside) fails.
func TestEveryOpenIsChecked(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if _, ok := opensDirectories[rel]; ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" {
				switch sel.Sel.Name {
				case "Open", "OpenFile", "ReadFile":
					t.Errorf("%s: os.%s: open files by name with regular.%s, which refuses named pipes and devices", fset.Position(sel.Pos()), sel.Sel.Name, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
