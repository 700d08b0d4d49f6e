package doccheck_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/doccheck"
	"github.com/sluicehq/sluice/internal/require"
)

const page = "# A page\n" +
	"\n" +
	"<!-- go prelude\n" +
	"var ctx context.Context\n" +
	"-->\n" +
	"\n" +
	"```go\n" +
	"func double(_ context.Context, n int) (int, error) { return 2 * n, nil }\n" +
	"```\n" +
	"\n" +
	"<!-- go\n" +
	"var in pipeline.Stream[int]\n" +
	"-->\n" +
	"```go\n" +
	"b := pipeline.New(\"p\")\n" +
	"doubled := pipeline.Map(b, \"double\", in, double)\n" +
	"...\n" +
	"if err := ctx.Err(); err != nil { ... }\n" +
	"```\n" +
	"\n" +
	"- in a list:\n" +
	"\n" +
	"  ```go\n" +
	"  // not compiled: only the shape of a call\n" +
	"  pipeline.Map(b, name, in, f)\n" +
	"  ```\n" +
	"\n" +
	"<!-- output: a test -->\n" +
	"\n" +
	"```text\n" +
	"some output\n" +
	"```\n" +
	"\n" +
	"````\n" +
	"```go\n" +
	"not a block of its own\n" +
	"```\n" +
	"````\n"

func TestParsePage(t *testing.T) {
	t.Parallel()
	p, err := doccheck.ParsePage("docs/a.md", page)
	require.NoError(t, err)
	assert.Equal(t, "var ctx context.Context\n", p.Prelude)
	assert.Equal(t, 4, p.PreludeLine)
	require.Len(t, p.Blocks, 5)

	b := p.Blocks[0]
	assert.Equal(t, "go", b.Lang)
	assert.Equal(t, 8, b.Line, "the line of the first line of code")
	assert.Empty(t, b.Before)

	b = p.Blocks[1]
	assert.Equal(t, "var in pipeline.Stream[int]\n", b.Before)
	assert.Equal(t, 12, b.BeforeLine)
	assert.Contains(t, b.Text, "\n// ...\n", "a line of ... is code left out")
	assert.Contains(t, b.Text, "{ /* ... */ }", "so is a block { ... }")

	b = p.Blocks[2]
	assert.Equal(t, "// not compiled: only the shape of a call\npipeline.Map(b, name, in, f)\n", b.Text,
		"a block in a list item loses the item's indentation")
	assert.Equal(t, "only the shape of a call", b.SkipReason())
	assert.Empty(t, p.Blocks[1].SkipReason())

	b = p.Blocks[3]
	assert.Equal(t, "text", b.Lang)
	assert.Equal(t, "output: a test", b.Marker)
	assert.Equal(t, "some output\n", b.Text)

	b = p.Blocks[4]
	assert.Empty(t, b.Lang)
	assert.Equal(t, "```go\nnot a block of its own\n```\n", b.Text, "a longer fence holds a shorter one")
}

func TestParsePageErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ text, want string }{
		"fence left open":      {"# x\n```go\nx := 1\n", "a.md:2: code block not closed"},
		"comment left open":    {"# x\n<!-- go prelude\nvar x int\n", "a.md:2: comment not closed"},
		"prelude with no code": {"# x\n<!-- go\nvar x int\n-->\n", "a.md:2: a \"<!-- go\" comment without a block after it"},
		"prelude before other code": {"# x\n<!-- go\nvar x int\n-->\n```sh\nls\n```\n",
			"a.md:2: a \"<!-- go\" comment before a block that is not Go"},
		"prelude far from code": {"# x\n<!-- go\nvar x int\n-->\nsome prose\n```go\nx++\n```\n",
			"a.md:2: a \"<!-- go\" comment must come right before its block"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := doccheck.ParsePage("a.md", tc.text)
			assert.EqualError(t, err, tc.want)
		})
	}
}

// A block that does not compile fails the check with the page's name and
// the line of the block, not the generated file's; a block that opted out
// is counted and not compiled.
func TestWriteAndVet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := root(t)
	imports, err := doccheck.ListImports(ctx, root, "github.com/sluicehq/sluice/...")
	require.NoError(t, err)
	assert.Equal(t, "github.com/sluicehq/sluice/pipeline", imports["pipeline"])
	assert.Equal(t, "context", imports["context"])
	assert.Equal(t, "database/sql", imports["sql"], "the standard library's, not connector/sql")
	assert.NotContains(t, imports, "rand", "math/rand or crypto/rand: a prelude must say")
	assert.NotContains(t, imports, "servicetest", "internal packages are not the users'")

	good, err := doccheck.ParsePage("docs/good.md", page)
	require.NoError(t, err)
	bad, err := doccheck.ParsePage("docs/bad.md", "# Bad\n\n```go\n"+
		"package main\n\nfunc main() {}\n```\n\n```go\n"+
		"var in pipeline.Stream[int]\n"+
		"pipeline.Transform(pipeline.New(\"p\"), \"t\", in, func(int) int { return 1 })\n"+
		"```\n")
	require.NoError(t, err)

	dir, err := os.MkdirTemp(".", "_docs")
	require.NoError(t, err)
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	st, err := doccheck.Write(filepath.Join(dir, "good"), []*doccheck.Page{good}, imports)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Compiled)
	assert.Equal(t, []string{"docs/good.md:24: only the shape of a call"}, st.Skipped)
	require.NoError(t, doccheck.Vet(ctx, root, filepath.Join(dir, "good"), vetFlags...))

	noReason, err := doccheck.ParsePage("docs/skip.md", "# Skip\n\n```go\n// not compiled:\nx\n```\n")
	require.NoError(t, err)
	_, err = doccheck.Write(filepath.Join(dir, "skip"), []*doccheck.Page{noReason}, imports)
	assert.EqualError(t, err, `docs/skip.md:4: "// not compiled:" needs a reason after it`)

	st, err = doccheck.Write(filepath.Join(dir, "bad"), []*doccheck.Page{bad}, imports)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Compiled)
	err = doccheck.Vet(ctx, root, filepath.Join(dir, "bad"), vetFlags...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "docs/bad.md:11: in call to pipeline.Transform", "the error names the page and the block's line")
	assert.NotContains(t, err.Error(), "line0010.go", "not the generated file")
}

// An empty page has no blocks, and writing and vetting nothing succeeds.
func TestEmpty(t *testing.T) {
	t.Parallel()
	p, err := doccheck.ParsePage("docs/empty.md", "")
	require.NoError(t, err)
	assert.Empty(t, p.Blocks)
	assert.Empty(t, p.Prelude)

	dir := t.TempDir()
	st, err := doccheck.Write(dir, []*doccheck.Page{p}, nil)
	require.NoError(t, err)
	assert.Zero(t, st.Compiled)
	assert.NoError(t, doccheck.Vet(t.Context(), dir, dir))
}
