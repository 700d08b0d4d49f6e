package doccheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Imports maps a package name to its import path, for the packages a
// fragment may name without importing them.
type Imports map[string]string

// ListImports asks the go command, run in dir, for the standard library
// and the packages matching patterns (the module's, say
// "github.com/sluicehq/sluice/..."), and returns the names that are
// unique among them, so that a name never silently picks one of two
// namesakes. Internal packages, commands and test-only packages are left
// out. Going through the go command, rather than walking folders, finds a
// package wherever its module lives (a workspace's other modules too).
func ListImports(ctx context.Context, dir string, patterns ...string) (Imports, error) {
	args := append([]string{"list", "-e", "-f", "{{.Name}} {{.ImportPath}}", "std"}, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("doccheck: go list: %w: %s", err, stderr.String())
	}
	seen := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		name, p, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || name == "main" || name == "" || strings.HasSuffix(name, "_test") ||
			slices.Contains(strings.Split(p, "/"), "internal") || strings.HasPrefix(p, "vendor/") {
			continue
		}
		seen[name] = append(seen[name], p)
	}
	imp := Imports{}
	for name, paths := range seen {
		if len(paths) == 1 {
			imp[name] = paths[0]
			continue
		}
		// A name that the standard library and the module share means
		// the standard library's package, as goimports reads it:
		// connector/sql is sql too, and pages import it by another name.
		var std []string
		for _, p := range paths {
			if !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
				std = append(std, p)
			}
		}
		if len(std) == 1 {
			imp[name] = std[0]
		}
	}
	return imp, nil
}

// Stats counts the Go blocks Write saw.
type Stats struct {
	// Compiled is the number of Go blocks written for the compiler.
	Compiled int
	// Skipped lists "file:line: reason" for each Go block that opted out.
	Skipped []string
	// Programs are the folders of the whole-file blocks, by "file:line"
	// of their first line, for a test that runs one.
	Programs map[string]string
}

// Write writes the Go blocks of pages as packages under dir, which must
// be a directory inside the module (or workspace) whose packages they
// use: one package per page for its fragments and prelude, and one per
// whole file. Each file starts with a line directive, so that the
// compiler reports an error at the page's line, not the generated file's.
// The packages are then compiled with Vet.
func Write(dir string, pages []*Page, imports Imports) (Stats, error) {
	var st Stats
	var errs []error
	for pi, p := range pages {
		pkgDir := filepath.Join(dir, fmt.Sprintf("page%02d", pi))
		var files []genFile
		pageImports := imports
		if strings.TrimSpace(p.Prelude) != "" {
			own, rest, err := splitImports(p.Prelude)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: prelude: %w", p.File, p.PreludeLine, err))
				continue
			}
			pageImports = without(merge(imports, own), topNames(rest))
			restLine := p.PreludeLine + strings.Count(p.Prelude[:len(p.Prelude)-len(rest)], "\n")
			var b strings.Builder
			writeImports(&b, nil, namesUsed(rest), pageImports)
			fmt.Fprintf(&b, "//line %s:%d\n%s\n", p.File, restLine, rest)
			files = append(files, genFile{"prelude.go", b.String()})
		}
		for _, b := range p.Blocks {
			if b.Lang != "go" {
				continue
			}
			if b.Skips() {
				r := b.SkipReason()
				if r == "" {
					errs = append(errs, fmt.Errorf("%s:%d: \"// not compiled:\" needs a reason after it", b.File, b.Line))
					continue
				}
				st.Skipped = append(st.Skipped, fmt.Sprintf("%s:%d: %s", b.File, b.Line, r))
				continue
			}
			st.Compiled++
			name := fmt.Sprintf("line%04d.go", b.Line)
			if isWholeFile(b.Text) {
				wholeDir := filepath.Join(dir, fmt.Sprintf("page%02d_line%04d", pi, b.Line))
				src := fmt.Sprintf("//line %s:%d\n%s", b.File, b.Line, b.Text)
				if err := writeFile(wholeDir, "main.go", src); err != nil {
					return st, err
				}
				if st.Programs == nil {
					st.Programs = map[string]string{}
				}
				st.Programs[fmt.Sprintf("%s:%d", b.File, b.Line)] = wholeDir
				continue
			}
			src, err := fragment(b, pageImports)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", b.File, b.Line, err))
				continue
			}
			files = append(files, genFile{name, src})
		}
		if len(files) == 0 {
			continue
		}
		for _, f := range files {
			if err := writeFile(pkgDir, f.name, "package doc\n\n"+f.src); err != nil {
				return st, err
			}
		}
	}
	return st, errors.Join(errs...)
}

type genFile struct{ name, src string }

func writeFile(dir, name, src string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644)
}

// isWholeFile reports whether src starts, after comments, with a package
// clause.
func isWholeFile(src string) bool {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, 0)
	_, tok, _ := s.Scan()
	return tok == token.PACKAGE
}

// merge returns base with extra added, extra winning.
func merge(base, extra Imports) Imports {
	m := make(Imports, len(base)+len(extra))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// fragment turns a fragment into the body of a generated file: top-level
// declarations as they are, anything else as the body of a function of
// its own, after the block's own prelude.
func fragment(bl Block, imports Imports) (string, error) {
	own, rest, err := splitImports(bl.Text)
	if err != nil {
		return "", err
	}
	restLine := bl.Line + strings.Count(bl.Text[:len(bl.Text)-len(rest)], "\n")
	beforeOwn, beforeRest, err := splitImports(bl.Before)
	if err != nil {
		return "", fmt.Errorf("the \"<!-- go\" comment before it: %w", err)
	}
	beforeLine := bl.BeforeLine + strings.Count(bl.Before[:len(bl.Before)-len(beforeRest)], "\n")
	// A name the fragment declares is its own, not a package's: a
	// fragment's metrics := prometheus.New() is no runtime/metrics.
	var mine []string
	for _, src := range []string{rest, beforeRest} {
		if isDecls(src) {
			mine = append(mine, topNames(src)...)
		} else {
			mine = append(mine, declared(src)...)
		}
	}
	imports = without(imports, mine)
	used := namesUsed(rest + "\n" + beforeRest)

	var b strings.Builder
	writeImports(&b, own, used, merge(imports, beforeOwn))
	if isDecls(rest) {
		if strings.TrimSpace(beforeRest) != "" {
			fmt.Fprintf(&b, "//line %s:%d\n%s\n", bl.File, beforeLine, beforeRest)
		}
		fmt.Fprintf(&b, "//line %s:%d\n%s\n", bl.File, restLine, rest)
		return b.String(), nil
	}
	// The function returns an error, so that the usual "if err != nil {
	// return err }" of a fragment compiles.
	fmt.Fprintf(&b, "func _() error {\n")
	if strings.TrimSpace(beforeRest) != "" {
		fmt.Fprintf(&b, "//line %s:%d\n%s\n", bl.File, beforeLine, beforeRest)
		for _, n := range declared(beforeRest) {
			fmt.Fprintf(&b, "\t_ = %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\t{\n//line %s:%d\n%s\n", bl.File, restLine, rest)
	for _, n := range declared(rest) {
		fmt.Fprintf(&b, "\t_ = %s\n", n)
	}
	b.WriteString("\t}\n\treturn nil\n}\n")
	return b.String(), nil
}

// splitImports parses the import declarations at the start of src and
// returns them by package name (the last path element, or the alias)
// along with the rest of src.
func splitImports(src string) (Imports, string, error) {
	own := Imports{}
	fset := token.NewFileSet()
	const head = "package p;"
	f, err := parser.ParseFile(fset, "", head+src, parser.ImportsOnly)
	if err != nil || len(f.Imports) == 0 {
		return own, src, nil // not ours to judge: the compiler will say
	}
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			return nil, "", err
		}
		name := guessName(p)
		if s.Name != nil {
			name = s.Name.Name
		}
		if name == "_" || name == "." {
			name += p // kept apart: several may be imported so
		}
		own[name] = p
	}
	last := f.Decls[len(f.Decls)-1]
	end := fset.Position(last.End()).Offset - len(head)
	return own, strings.TrimLeft(src[end:], ";"), nil
}

// without returns imp without names.
func without(imp Imports, names []string) Imports {
	var m Imports
	for _, n := range names {
		if _, ok := imp[n]; !ok {
			continue
		}
		if m == nil {
			m = merge(imp, Imports{})
		}
		delete(m, n)
	}
	if m == nil {
		return imp
	}
	return m
}

// topNames returns the names that the top-level declarations of src
// declare.
func topNames(src string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+src, 0)
	if err != nil {
		return nil
	}
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names = append(names, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					for _, id := range sp.Names {
						names = append(names, id.Name)
					}
				case *ast.TypeSpec:
					names = append(names, sp.Name.Name)
				}
			}
		}
	}
	return names
}

// guessName guesses the name of the package at import path p the way
// goimports does: the last element, without a major version, a "go-"
// prefix or a "-go" or ".go" suffix (github.com/redis/go-redis/v9 is
// redis, github.com/nats-io/nats.go is nats). A prelude whose package is
// named otherwise imports it with that name.
func guessName(p string) string {
	name := path.Base(p)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = path.Base(path.Dir(p))
	}
	name = strings.TrimPrefix(name, "go-")
	name = strings.TrimSuffix(strings.TrimSuffix(name, "-go"), ".go")
	return name
}

// writeImports writes an import declaration for the packages a fragment
// imports itself (all of them: an unused one is the fragment's mistake)
// and for the names used that imports knows.
func writeImports(b *strings.Builder, own Imports, used []string, imports Imports) {
	var lines []string
	for name, p := range own {
		if strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") {
			name = name[:1]
		}
		lines = append(lines, fmt.Sprintf("%s %q", name, p))
	}
	for _, name := range used {
		if _, ok := own[name]; ok {
			continue
		}
		if p, ok := imports[name]; ok {
			lines = append(lines, fmt.Sprintf("%s %q", name, p))
		}
	}
	if len(lines) == 0 {
		return
	}
	slices.Sort(lines)
	b.WriteString("import (\n")
	for _, l := range lines {
		b.WriteString("\t" + l + "\n")
	}
	b.WriteString(")\n\n")
}

// namesUsed returns the identifiers that stand before a selector's dot
// and not after another dot: the candidates for a package name.
func namesUsed(src string) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), nil, 0)
	var names []string
	prev, prevLit, prevPrev := token.ILLEGAL, "", token.ILLEGAL
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && prev == token.IDENT && prevPrev != token.PERIOD && !slices.Contains(names, prevLit) {
			names = append(names, prevLit)
		}
		prevPrev, prev, prevLit = prev, tok, lit
	}
	return names
}

// isDecls reports whether src is a list of top-level declarations.
func isDecls(src string) bool {
	if strings.TrimSpace(src) == "" {
		return true
	}
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+src, 0)
	return err == nil
}

// declared returns the names that the statements of src declare at their
// own level (x := ..., var x, const x, func literals assigned), so that
// the generated function can use them once: a fragment that ends by
// declaring what the prose then talks about still compiles.
func declared(src string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+src+"\n}", 0)
	if err != nil {
		return nil // the compiler will report it, at the page's line
	}
	var names []string
	add := func(id *ast.Ident) {
		if id != nil && id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					id, _ := e.(*ast.Ident)
					add(id)
				}
			}
		case *ast.DeclStmt:
			gd, ok := st.Decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, sp := range gd.Specs {
				for _, id := range sp.(*ast.ValueSpec).Names {
					add(id)
				}
			}
		}
	}
	return names
}

// Vet runs go vet on every package under dir, from root (a directory of
// the module), and returns its complaints, with the pages' names and
// lines, as an error.
func Vet(ctx context.Context, root, dir string, flags ...string) error {
	// Listed one by one: a pattern ending in /... skips the folder, whose
	// name starts with _ to keep it out of everyone else's ./... .
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	args := append([]string{"vet"}, flags...)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rel, err := filepath.Rel(root, filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		args = append(args, "./"+filepath.ToSlash(rel))
	}
	if len(args) == 1+len(flags) {
		return nil
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		// The line directives name the pages relative to the repository;
		// the go command puts them in the generated package's folder.
		rel, _ := filepath.Rel(root, dir)
		gen := regexp.MustCompile(regexp.QuoteMeta(filepath.ToSlash(rel)) + `/page\d+(_line\d+)?/`)
		return fmt.Errorf("go vet: %w\n%s", err, gen.ReplaceAll(out, nil))
	}
	return nil
}
