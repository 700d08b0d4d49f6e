// Package fielddoc finds exported struct fields that have no doc comment,
// so that a package's tests can keep every option documented: a field a
// user sets should say what it does and what its zero value means.
package fielddoc

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// Undocumented parses the non-test Go files in dir (one package) and
// returns "Type.Field" for every exported field of the named struct types
// that has neither a doc comment nor a line comment. A field declared
// with others on one line ("A, B int") shares their comment. An embedded
// field of an exported type (Backoff, *Backoff, resilience.Backoff) is a
// field too, named by its type. It fails if a named type is missing or is
// not a struct, so that a renamed type does not turn the check silently
// green.
func Undocumented(dir string, types ...string) ([]string, error) {
	pkg, err := parse(dir)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*doc.Type, len(pkg.Types))
	for _, t := range pkg.Types {
		byName[t.Name] = t
	}
	var missing []string
	for _, name := range types {
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("fielddoc: no type %s in %s", name, dir)
		}
		st, ok := structOf(t)
		if !ok {
			return nil, fmt.Errorf("fielddoc: type %s is not a struct", name)
		}
		for _, f := range st.Fields.List {
			if f.Doc.Text() != "" || f.Comment.Text() != "" {
				continue
			}
			if len(f.Names) == 0 {
				if n := embeddedName(f.Type); ast.IsExported(n) {
					missing = append(missing, name+"."+n)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					missing = append(missing, name+"."+n.Name)
				}
			}
		}
	}
	return missing, nil
}

// Structs returns the names of the exported struct types declared in the
// non-test Go files in dir, sorted, so that a check over them covers a
// struct added later without anyone listing it.
func Structs(dir string) ([]string, error) {
	pkg, err := parse(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range pkg.Types { // sorted by name
		if _, ok := structOf(t); ok && ast.IsExported(t.Name) {
			names = append(names, t.Name)
		}
	}
	return names, nil
}

// embeddedName is the field name of an embedded field of type x: the
// type's name without its pointer, package qualifier or type arguments.
func embeddedName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(x.X)
	case *ast.IndexListExpr:
		return embeddedName(x.X)
	case *ast.ParenExpr:
		return embeddedName(x.X)
	}
	return ""
}

// parse reads the package in dir from its non-test Go files.
func parse(dir string) (*doc.Package, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fielddoc: %w", err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("fielddoc: %w", err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "x", doc.AllDecls)
	if err != nil {
		return nil, fmt.Errorf("fielddoc: %w", err)
	}
	return pkg, nil
}

func structOf(t *doc.Type) (*ast.StructType, bool) {
	for _, s := range t.Decl.Specs {
		if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == t.Name {
			st, ok := ts.Type.(*ast.StructType)
			return st, ok
		}
	}
	return nil, false
}
