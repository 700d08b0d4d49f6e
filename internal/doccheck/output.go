package doccheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// What a page shows a program printing is in a block labelled ```output,
// or ```console for a shell session (lines starting "$ " are commands, the
// others what they printed). Each such block is either
//
//   - checked: a hidden comment "<!-- output: DIR NAME -->" right before
//     it names, in the folder DIR of the repository, an Example whose
//     "// Output:" is the block (CheckOutputs compares them; go test
//     checks the Example), or a test that produces the block's output
//     itself and compares (CheckOutputs makes sure it exists; Page.Output
//     finds the block for it); or
//   - abridged, and says so where the reader sees it: the line of prose
//     right before the block contains the word "abridged".
//
// Every block has a language, so that no output (and no Go) hides in a
// block without one: ```text is for pictures, tables and file contents
// that no program printed.

// OutputLangs are the languages of blocks that show what a program
// printed.
var OutputLangs = []string{"output", "console"}

var outputMarker = regexp.MustCompile(`^output: (\S+) ((?:Example|Test)\w*)$`)

// Output returns the block of the page marked "<!-- output: dir name -->".
func (p *Page) Output(dir, name string) (Block, error) {
	want := "output: " + dir + " " + name
	for _, b := range p.Blocks {
		if b.Marker == want {
			return b, nil
		}
	}
	return Block{}, fmt.Errorf("%s: no block marked <!-- %s -->", p.File, want)
}

// CheckOutputs checks the output blocks of pages, under root, the
// repository's directory: every block has a language, every output block
// is checked or abridged, and a checked one names an Example whose output
// it is, or a test that exists. It returns one error per problem, each
// naming the page and line, and the number of blocks checked and
// abridged.
func CheckOutputs(root string, pages []*Page) (checked, abridged int, err error) {
	var errs []error
	funcs := map[string]*pkgFuncs{}
	for _, p := range pages {
		for _, b := range p.Blocks {
			at := fmt.Sprintf("%s:%d", b.File, b.Line-1)
			if b.Lang == "" {
				errs = append(errs, fmt.Errorf("%s: a block without a language: label it (go, sh, output, console, text, ...)", at))
				continue
			}
			m := outputMarker.FindStringSubmatch(b.Marker)
			if strings.HasPrefix(b.Marker, "output:") && m == nil {
				errs = append(errs, fmt.Errorf("%s: %q: want <!-- output: DIR ExampleName --> or <!-- output: DIR TestName -->", at, b.Marker))
				continue
			}
			if m == nil {
				if !slices.Contains(OutputLangs, b.Lang) {
					continue
				}
				if !strings.Contains(strings.ToLower(b.Intro), "abridged") {
					errs = append(errs, fmt.Errorf("%s: an output block that no test produces: mark it <!-- output: DIR TestOrExample --> or say \"abridged\" in the line before it", at))
					continue
				}
				abridged++
				continue
			}
			dir, name := m[1], m[2]
			fs, ok := funcs[dir]
			if !ok {
				var err error
				if fs, err = readTestFuncs(filepath.Join(root, filepath.FromSlash(dir))); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", at, err))
					continue
				}
				funcs[dir] = fs
			}
			switch {
			case strings.HasPrefix(name, "Example"):
				out, ok := fs.examples[name]
				if !ok {
					errs = append(errs, fmt.Errorf("%s: no %s with an // Output: comment in %s", at, name, dir))
					continue
				}
				if normalize(out) != normalize(b.Text) {
					errs = append(errs, fmt.Errorf("%s: the block is not the output of %s in %s:\n--- block\n%s--- output\n%s", at, name, dir, normalize(b.Text), normalize(out)))
					continue
				}
			case !slices.Contains(fs.tests, name):
				errs = append(errs, fmt.Errorf("%s: no test %s in %s", at, name, dir))
				continue
			}
			checked++
		}
	}
	return checked, abridged, errors.Join(errs...)
}

// normalize trims the spaces at the ends of lines and of the text, as go
// test does when it compares an Example's output.
func normalize(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n") + "\n"
}

type pkgFuncs struct {
	examples map[string]string // name: output
	tests    []string
}

// readTestFuncs reads the Examples with an output and the Test functions
// of the _test.go files in dir.
func readTestFuncs(dir string) (*pkgFuncs, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no test files in %s", dir)
	}
	fs := &pkgFuncs{examples: map[string]string{}}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				fs.tests = append(fs.tests, fd.Name.Name)
			}
		}
	}
	for _, ex := range doc.Examples(parsed...) {
		if ex.Output != "" || ex.EmptyOutput {
			fs.examples["Example"+ex.Name] = ex.Output
		}
	}
	return fs, nil
}
