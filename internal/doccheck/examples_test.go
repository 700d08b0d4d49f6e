package doccheck_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// notImported are the folders whose packages no program imports: the
// command, the samples, the benchmarks and the internal packages.
var notImported = []string{"bench", "cmd", "internal", "samples"}

// compiledOnly are the packages whose Examples cannot run in a plain
// go test: they need a broker, or a *testing.T (the conformance suites).
// Their Examples are compiled, not run.
var compiledOnly = []string{
	"checkpoint/checkpointtest",
	"connector/connectortest",
	"connector/nats",
	"connector/rabbitmq",
	"idempotency/storetest",
}

// Every package a program imports documents its main use with an Example
// that go test runs and whose output it checks (one with an // Output:
// comment); the packages in compiledOnly have at least an Example that
// compiles. The walk goes by folders, not modules, so that it covers every
// module of the repository.
func TestEveryPackageHasAnExample(t *testing.T) {
	t.Parallel()
	root := root(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
			slices.Contains(notImported, strings.Split(rel, "/")[0])) {
			return filepath.SkipDir
		}
		hasCode, examples, err := examplesIn(path)
		if err != nil || !hasCode || rel == "." {
			return err
		}
		checked++
		switch {
		case len(examples) == 0:
			t.Errorf("package %s has no Example", rel)
		case slices.Contains(compiledOnly, rel):
		case !slices.ContainsFunc(examples, func(e *doc.Example) bool { return e.Output != "" || e.EmptyOutput }):
			t.Errorf("package %s has no Example with an // Output: comment, which go test runs", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 15 {
		t.Errorf("the walk found %d packages, want the repository's (more than 15)", checked)
	}
}

// examplesIn reports whether the folder dir holds a package (a .go file
// that is not a test), and the Examples of its test files.
func examplesIn(dir string) (hasCode bool, examples []*doc.Example, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, nil, err
	}
	fset := token.NewFileSet()
	var tests []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if !strings.HasSuffix(name, "_test.go") {
			hasCode = true
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return false, nil, err
		}
		tests = append(tests, f)
	}
	return hasCode, doc.Examples(tests...), nil
}
