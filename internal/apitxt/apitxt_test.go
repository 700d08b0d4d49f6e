package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every module's api.txt matches its code; a stale one fails with the
// difference and the command that updates it.
func TestAPITxtUpToDate(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err != nil {
		t.Fatal(err)
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var sample = map[string]string{
	"go.mod": "module example.com/m\n\ngo 1.26\n",
	"b.go": `package m

import "context"

// Kind is a kind.
type Kind int

const (
	KindA Kind = iota
	KindB
	kindC
)

const Limit = 10

var ErrX = errNew("x")

func errNew(string) error { return nil }

type Stream[T any] struct {
	Name string
	hidden int
	Embedded
}

type Embedded struct{}

type Runner interface {
	Run(ctx context.Context, n int) (int, error)
	stop()
}

func (s *Stream[T]) Len() int { return 0 }
func (s Stream[T]) hide()     {}
func (h hiddenType) Shown()   {}

type hiddenType struct{}
`,
	"a.go": `package m

func Map[In, Out any](f func(In) Out, xs ...In) []Out { return nil }
`,
	"a_test.go":         "package m\n\nfunc TestOnly() {}\n",
	"internal/x/x.go":   "package x\n\nfunc Internal() {}\n",
	"cmd/tool/main.go":  "package main\n\nfunc Exported() {}\n",
	"_skip/s.go":        "package s\n\nfunc Skipped() {}\n",
	"sub/go.mod":        "module example.com/m/sub\n",
	"sub/sub.go":        "package sub\n\nfunc Nested() {}\n",
	"lib/lib.go":        "package lib\n\ntype Alias = int\n",
	"lib/ignore.go":     "//go:build ignore\n\npackage main\n\nfunc Ignored() {}\n",
	"testdata/t/t.go":   "package t\n\nfunc Data() {}\n",
	"lib/.hidden/h.go":  "package h\n\nfunc Hidden() {}\n",
	"lib/doc.go":        "// Package lib.\npackage lib\n",
	"empty/README.md":   "no Go here\n",
	"lib/more/more.go":  "package more\n\nfunc More(a, b int) (c, d string) { return }\n",
	"lib/more/more2.go": "package more\n\nvar Count, Total int\n",
}

const wantRoot = `# Exported API of module example.com/m. Generated: make api (or: go run ./internal/apitxt).
pkg example.com/m, const KindA Kind = iota
pkg example.com/m, const KindB Kind
pkg example.com/m, const Limit = 10
pkg example.com/m, func Map[In, Out any](func(In) Out, ...In) []Out
pkg example.com/m, method (*Stream[T]) Len() int
pkg example.com/m, type Embedded struct
pkg example.com/m, type Kind int
pkg example.com/m, type Runner interface
pkg example.com/m, type Runner interface, Run(context.Context, int) (int, error)
pkg example.com/m, type Runner interface, unexported methods
pkg example.com/m, type Stream[T any] struct
pkg example.com/m, type Stream[T any] struct, Name string
pkg example.com/m, type Stream[T any] struct, embedded Embedded
pkg example.com/m, var ErrX = errNew("x")
pkg example.com/m/lib, type Alias = int
pkg example.com/m/lib/more, func More(int, int) (string, string)
pkg example.com/m/lib/more, var Count int
pkg example.com/m/lib/more, var Total int
`

// The generator lists exported names only, of importable packages only,
// sorted, and leaves a nested module to its own api.txt.
func TestGenerate(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, sample)
	mods, err := Modules(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 2 || mods[0].Path != "example.com/m" || mods[1].Path != "example.com/m/sub" {
		t.Fatalf("modules: %+v", mods)
	}
	got, err := Generate(mods[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantRoot {
		t.Errorf("api.txt:\n%s\ndiff from want:\n%s", got, Diff([]byte(wantRoot), got))
	}
	sub, err := Generate(mods[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(sub), "\npkg example.com/m/sub, func Nested()\n") {
		t.Errorf("nested module's api.txt:\n%s", sub)
	}
}

// The same code gives the same bytes however often it is generated, and a
// change to a signature shows as one line out and one line in; -check
// fails until api.txt is written again, naming the command.
func TestCheckShowsAChange(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, sample)
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(root, "api.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(root, "api.txt"))
	if string(first) != string(again) {
		t.Fatalf("two runs differ:\n%s", Diff(first, again))
	}
	if err := run(root, true); err != nil {
		t.Fatalf("check right after writing: %v", err)
	}

	writeFiles(t, root, map[string]string{"a.go": "package m\n\nfunc Map[In, Out any](f func(In) Out, xs []In) []Out { return nil }\n"})
	err = run(root, true)
	if err == nil {
		t.Fatal("check passed after a signature changed")
	}
	for _, want := range []string{
		"api.txt is stale",
		"-pkg example.com/m, func Map[In, Out any](func(In) Out, ...In) []Out\n",
		"+pkg example.com/m, func Map[In, Out any](func(In) Out, []In) []Out\n",
		"make api",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "sub") {
		t.Errorf("the unchanged nested module is reported:\n%v", err)
	}
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err != nil {
		t.Fatalf("check after rewriting: %v", err)
	}
}

func TestDiff(t *testing.T) {
	got := Diff([]byte("a\nb\nd\n"), []byte("a\nc\nd\ne\n"))
	if want := "-b\n+c\n+e\n"; got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if got := Diff([]byte("a\n"), []byte("a\n")); got != "" {
		t.Errorf("Diff of equal = %q", got)
	}
}
