// Command apitxt writes, for every module of the repository, an api.txt
// beside its go.mod that lists every exported name of the module's
// importable packages with its signature, one per line, sorted, so that a
// change to the public surface shows in review as a change to api.txt.
//
// Usage, from anywhere inside the repository:
//
//	go run ./internal/apitxt          # rewrite every api.txt
//	go run ./internal/apitxt -check   # fail, printing the difference, when one is stale
//
// A module is a folder holding a go.mod; a folder with its own go.mod is
// left out of its parent's list. Commands (package main), internal
// packages, test files, testdata and folders whose names start with "."
// or "_" are not part of the surface. The tool reads source only
// (go/parser, go/printer), so it needs neither the network nor a build.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// updateCommand is what a stale api.txt asks the reader to run.
const updateCommand = "make api (or: go run ./internal/apitxt)"

func main() {
	check := flag.Bool("check", false, "report stale api.txt files instead of writing them")
	root := flag.String("root", "", "repository root (default: the nearest folder upwards holding .git, else go.mod)")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "apitxt:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	if root == "" {
		var err error
		if root, err = findRoot(); err != nil {
			return err
		}
	}
	mods, err := Modules(root)
	if err != nil {
		return err
	}
	var stale []error
	for _, m := range mods {
		want, err := Generate(m)
		if err != nil {
			return err
		}
		file := filepath.Join(m.Dir, "api.txt")
		if !check {
			if err := os.WriteFile(file, want, 0o644); err != nil {
				return err
			}
			continue
		}
		have, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if d := Diff(have, want); d != "" {
			rel, _ := filepath.Rel(root, file)
			stale = append(stale, fmt.Errorf("%s is stale (- in the file, + in the code):\n%s", rel, d))
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%w\nupdate with: %s", errors.Join(stale...), updateCommand)
	}
	return nil
}

// findRoot walks up from the working folder to the repository root: the
// first folder holding .git, else the last one holding a go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	found := ""
	for {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return dir, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			found = dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if found == "" {
		return "", errors.New("no go.mod in this folder or above it")
	}
	return found, nil
}

// A Module is a folder holding a go.mod.
type Module struct {
	Dir  string // the folder
	Path string // the module path its go.mod declares
}

// Modules finds every module under root, sorted by folder.
func Modules(root string) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		mp, err := modulePath(p)
		if err != nil {
			return err
		}
		mods = append(mods, Module{Dir: filepath.Dir(p), Path: mp})
		return nil
	})
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Dir, b.Dir) })
	return mods, err
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// Generate returns the api.txt of m: a header line, then one line per
// exported name of its importable packages, sorted.
func Generate(m Module) ([]byte, error) {
	var lines []string
	err := filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != m.Dir {
			if skipDir(d.Name()) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		rel, err := filepath.Rel(m.Dir, p)
		if err != nil {
			return err
		}
		importPath := m.Path
		if rel != "." {
			importPath = path.Join(m.Path, filepath.ToSlash(rel))
		}
		if slices.Contains(strings.Split(importPath, "/"), "internal") {
			return filepath.SkipDir // not importable from outside, nor is anything below
		}
		pkgLines, err := packageLines(p, importPath)
		if err != nil {
			return err
		}
		lines = append(lines, pkgLines...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Exported API of module %s. Generated: %s.\n", m.Path, updateCommand)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// packageLines lists the exported names of the package in dir, or nothing
// for a folder without Go files, a command or test-only package.
func packageLines(dir, importPath string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || skipDir(name) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if ignored(f) || f.Name.Name == "main" {
			continue
		}
		files = append(files, f)
	}
	w := &writer{fset: fset, prefix: "pkg " + importPath + ", "}
	for _, f := range files {
		for _, decl := range f.Decls {
			w.decl(decl)
		}
	}
	return w.lines, nil
}

// ignored reports a file built never (//go:build ignore).
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() >= f.Package {
			break
		}
		for _, c := range cg.List {
			if c.Text == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

// expr prints an expression on one line.
func (w *writer) expr(e ast.Expr) string {
	var b strings.Builder
	if err := printer.Fprint(&b, w.fset, e); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func (w *writer) decl(decl ast.Decl) {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		w.funcDecl(d)
	case *ast.GenDecl:
		var lastType ast.Expr // a const spec without a type repeats the last one's
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				w.typeSpec(s)
			case *ast.ValueSpec:
				kind := "var"
				if d.Tok == token.CONST {
					kind = "const"
					if s.Type != nil || len(s.Values) > 0 {
						lastType = s.Type
					}
				}
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					line := kind + " " + n.Name
					switch {
					case s.Type != nil:
						line += " " + w.expr(s.Type)
					case kind == "const" && len(s.Values) == 0 && lastType != nil:
						line += " " + w.expr(lastType)
					}
					if i < len(s.Values) && (kind == "const" || s.Type == nil) {
						line += " = " + w.expr(s.Values[i])
					}
					w.add("%s", line)
				}
			}
		}
	}
}

func (w *writer) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	if d.Recv == nil {
		w.add("func %s%s%s", d.Name.Name, w.typeParams(d.Type.TypeParams), w.signature(d.Type))
		return
	}
	recv := d.Recv.List[0].Type
	base := recv
	if star, ok := base.(*ast.StarExpr); ok {
		base = star.X
	}
	switch t := base.(type) {
	case *ast.IndexExpr:
		base = t.X
	case *ast.IndexListExpr:
		base = t.X
	}
	if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
		return // a method of an unexported type is not reachable by name
	}
	w.add("method (%s) %s%s", w.expr(recv), d.Name.Name, w.signature(d.Type))
}

// typeParams prints [T any, K comparable], or nothing.
func (w *writer) typeParams(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		names := make([]string, len(f.Names))
		for i, n := range f.Names {
			names[i] = n.Name
		}
		parts = append(parts, strings.Join(names, ", ")+" "+w.expr(f.Type))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature prints a function's parameter and result types, without the
// parameter names: renaming a parameter does not change the surface.
func (w *writer) signature(ft *ast.FuncType) string {
	s := "(" + w.types(ft.Params) + ")"
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return s
	}
	res := w.types(ft.Results)
	if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
		return s + " " + res
	}
	return s + " (" + res + ")"
}

func (w *writer) types(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		t := w.expr(f.Type)
		for range max(1, len(f.Names)) {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, ", ")
}

func (w *writer) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name + w.typeParams(s.TypeParams)
	if s.Assign.IsValid() {
		w.add("type %s = %s", name, w.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		w.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if embeddedExported(f.Type) {
					w.add("type %s struct, embedded %s", name, w.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add("type %s struct, %s %s", name, n.Name, w.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		w.add("type %s interface", name)
		for _, f := range t.Methods.List {
			if len(f.Names) == 0 {
				w.add("type %s interface, embedded %s", name, w.expr(f.Type))
				continue
			}
			for _, n := range f.Names {
				if ft, ok := f.Type.(*ast.FuncType); ok && n.IsExported() {
					w.add("type %s interface, %s%s", name, n.Name, w.signature(ft))
				} else if !n.IsExported() {
					w.add("type %s interface, unexported methods", name)
				}
			}
		}
	default:
		w.add("type %s %s", name, w.expr(s.Type))
	}
}

// embeddedExported reports whether an embedded field's name is exported:
// T, *T, p.T, T[X].
func embeddedExported(e ast.Expr) bool {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.IsExported()
		case *ast.Ident:
			return t.IsExported()
		default:
			return false
		}
	}
}

// Diff lists the lines only in have (prefixed "-") and only in want ("+"),
// in order. api.txt lines are sorted and unique, so a set difference is
// the whole story.
func Diff(have, want []byte) string {
	h := strings.Split(strings.TrimRight(string(have), "\n"), "\n")
	wl := strings.Split(strings.TrimRight(string(want), "\n"), "\n")
	var b strings.Builder
	i, j := 0, 0
	for i < len(h) || j < len(wl) {
		switch {
		case j == len(wl) || (i < len(h) && h[i] < wl[j]):
			if h[i] != "" {
				fmt.Fprintf(&b, "-%s\n", h[i])
			}
			i++
		case i == len(h) || wl[j] < h[i]:
			fmt.Fprintf(&b, "+%s\n", wl[j])
			j++
		default:
			i++
			j++
		}
	}
	return b.String()
}
