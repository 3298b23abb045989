package field

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// errorMakers are the functions whose string arguments become error
// messages: fmt.Errorf, errors.New, this package's Errorf and Invalid,
// and the packages' own helpers named errorf or add (the closures that
// collect a Validate's errors).
var errorMakers = map[string]bool{"Errorf": true, "New": true, "Invalid": true, "errorf": true, "add": true}

// flagLike is a command-line flag written into a message: --name, or
// --%s formatted.
var flagLike = regexp.MustCompile(`--[a-z%]`)

// TestNoFlagsInLibraryErrors checks that no error message made outside
// cmd/ names a command-line flag: the library names fields and values in
// its own words (a field's JSON name), and cmd/polysketch says them as
// flags (asCLI).
func TestNoFlagsInLibraryErrors(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "cmd" || name == "testdata" || name == "_asm" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !errorMakers[funcName(call.Fun)] {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "errors" {
					return true // a constructor, not errors.New
				}
			}
			for _, arg := range call.Args {
				ast.Inspect(arg, func(n ast.Node) bool {
					lit, ok := n.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						return true
					}
					if s, err := strconv.Unquote(lit.Value); err == nil && flagLike.MatchString(s) {
						rel, _ := filepath.Rel(root, fset.Position(lit.Pos()).Filename)
						t.Errorf("%s:%d: error message %s names a flag: name the field (field.Name) and let cmd/polysketch say it as a flag",
							rel, fset.Position(lit.Pos()).Line, lit.Value)
					}
					return true
				})
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the module", checked)
	}
}

// funcName returns the name a call calls: f or x.f.
func funcName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// moduleRoot returns the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
