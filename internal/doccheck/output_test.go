package doccheck_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/doccheck"
	"github.com/sluicehq/sluice/internal/require"
)

const pkgTest = `package p_test

import "fmt"

func ExampleHello() {
	fmt.Println("hello  ")
	fmt.Println("world")
	// Output:
	// hello
	// world
}

func TestSession(t *testing.T) {}
`

// Each kind of output block passes or fails the check as the rules say,
// and the errors name the page and the fence's line.
func TestCheckOutputs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "p"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "p", "p_test.go"), []byte(pkgTest), 0o644))

	good := "# Good\n\n" +
		"<!-- output: p ExampleHello -->\n```output\nhello\nworld\n```\n\n" +
		"<!-- output: p TestSession -->\n```console\n$ sluice\nsomething\n```\n\n" +
		"Its last frame (abridged):\n\n```output\n...\n```\n\n" +
		"A picture:\n\n```text\na -> b\n```\n"
	p, err := doccheck.ParsePage("docs/good.md", good)
	require.NoError(t, err)
	checked, abridged, err := doccheck.CheckOutputs(root, []*doccheck.Page{p})
	require.NoError(t, err)
	assert.Equal(t, 2, checked)
	assert.Equal(t, 1, abridged)
	b, err := p.Output("p", "TestSession")
	require.NoError(t, err)
	assert.Equal(t, "$ sluice\nsomething\n", b.Text)
	_, err = p.Output("p", "TestOther")
	assert.EqualError(t, err, "docs/good.md: no block marked <!-- output: p TestOther -->")

	for name, tc := range map[string]struct{ page, want string }{
		"no language":       {"# x\n\n```\nls\n```\n", "docs/x.md:3: a block without a language"},
		"unchecked output":  {"# x\n\nIt prints:\n\n```output\nhi\n```\n", "docs/x.md:5: an output block that no test produces"},
		"abridged too soon": {"# x\n\nAbridged.\n\nIt prints:\n\n```output\nhi\n```\n", "docs/x.md:7: an output block that no test produces"},
		"wrong output":      {"# x\n\n<!-- output: p ExampleHello -->\n```output\nhello\n```\n", "docs/x.md:4: the block is not the output of ExampleHello in p"},
		"no such example":   {"# x\n\n<!-- output: p ExampleBye -->\n```output\nbye\n```\n", "docs/x.md:4: no ExampleBye with an // Output: comment in p"},
		"no such test":      {"# x\n\n<!-- output: p TestBye -->\n```console\n$ bye\n```\n", "docs/x.md:4: no test TestBye in p"},
		"no such folder":    {"# x\n\n<!-- output: q TestBye -->\n```console\n$ bye\n```\n", "docs/x.md:4: no test files in"},
		"bad marker":        {"# x\n\n<!-- output: p -->\n```output\nhi\n```\n", "docs/x.md:4: \"output: p\": want"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := doccheck.ParsePage("docs/x.md", tc.page)
			require.NoError(t, err)
			_, _, err = doccheck.CheckOutputs(root, []*doccheck.Page{p})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
