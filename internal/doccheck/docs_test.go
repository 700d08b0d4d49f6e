package doccheck_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/doccheck"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// root is the repository's directory: the one of the module that holds
// this package, as the go command sees it.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOMOD").Output()
	require.NoError(t, err)
	gomod := strings.TrimSpace(string(out))
	require.NotEmpty(t, gomod, "the doc check runs inside the module")
	require.NotEqual(t, os.DevNull, gomod, "the doc check runs inside the module")
	return filepath.Dir(gomod)
}

// needWorkspace skips a test that needs go.work when the workspace is off
// (`go env GOWORK` empty or "off", as in `GOWORK=off go test` of the core
// module on its own): the pages' blocks import the nested modules, which
// the core's go.mod cannot provide. Under SLUICE_REQUIRE_SERVICES=1 (CI,
// .ci/run) it fails instead, so the check never goes missing there; `make
// test` runs in the workspace.
func needWorkspace(t *testing.T) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOWORK").Output()
	require.NoError(t, err)
	gowork := strings.TrimSpace(string(out))
	if gowork != "" && gowork != "off" {
		return
	}
	msg := "the doc check compiles blocks that import every module of the repository, so it needs go.work, " +
		"and `go env GOWORK` is " + strconv.Quote(gowork) + "; run it in the checkout with the workspace on (make test)"
	if os.Getenv(servicetest.RequireEnv) == "1" {
		t.Fatalf("%s (%s=1: not skipped)", msg, servicetest.RequireEnv)
	}
	t.Skip(msg)
}

// Every Go block of README.md and docs/*.md compiles (and passes go vet),
// with the hidden preludes the pages give their fragments. The blocks
// are written as packages in a temporary folder of this package's and
// compiled by one go vet, whose complaints name the page and its line.
func TestDocsCompile(t *testing.T) {
	t.Parallel()
	needWorkspace(t)
	ctx := t.Context()
	root := root(t)
	pages, err := doccheck.Pages(root)
	require.NoError(t, err)
	imports, err := doccheck.ListImports(ctx, root, "github.com/sluicehq/sluice/...")
	require.NoError(t, err)

	dir, err := os.MkdirTemp(".", "_docs")
	require.NoError(t, err)
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	st, err := doccheck.Write(dir, pages, imports)
	require.NoError(t, err)
	t.Logf("%d Go blocks compiled, %d skipped", st.Compiled, len(st.Skipped))
	for _, s := range st.Skipped {
		t.Logf("skipped %s", s)
	}
	require.NoError(t, doccheck.Vet(context.WithoutCancel(ctx), root, dir, vetFlags...))

	// Getting started says its first program "prints SLUICE and GATE".
	prog, ok := st.Programs["docs/getting-started.md:"+strconv.Itoa(firstGoLine(t, pages, "docs/getting-started.md"))]
	require.True(t, ok, "getting-started begins with a whole program")
	cmd := exec.CommandContext(ctx, "go", "run", ".")
	cmd.Dir = prog
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "SLUICE\nGATE\n", string(out))
	page := pageOf(t, pages, "docs/getting-started.md")
	assert.Contains(t, page.Blocks[sh(t, page, "go run .")].Text, "# prints SLUICE and GATE", "the page says what the test checks")
}

func pageOf(t *testing.T, pages []*doccheck.Page, file string) *doccheck.Page {
	t.Helper()
	for _, p := range pages {
		if p.File == file {
			return p
		}
	}
	t.Fatalf("no page %s", file)
	return nil
}

// firstGoLine is the line of the first Go block of a page.
func firstGoLine(t *testing.T, pages []*doccheck.Page, file string) int {
	t.Helper()
	for _, b := range pageOf(t, pages, file).Blocks {
		if b.Lang == "go" {
			return b.Line
		}
	}
	t.Fatalf("no Go block in %s", file)
	return 0
}

// sh is the index of the first sh block of page holding text.
func sh(t *testing.T, page *doccheck.Page, text string) int {
	t.Helper()
	for i, b := range page.Blocks {
		if b.Lang == "sh" && strings.Contains(b.Text, text) {
			return i
		}
	}
	t.Fatalf("no sh block with %q in %s", text, page.File)
	return 0
}

// Every block of README.md and docs/*.md has a language, and every block
// that shows what a program printed is produced by a test (an Example
// whose output it is, or a test that runs the commands it shows) or says
// it is abridged.
func TestDocsOutputs(t *testing.T) {
	t.Parallel()
	root := root(t)
	pages, err := doccheck.Pages(root)
	require.NoError(t, err)
	checked, abridged, err := doccheck.CheckOutputs(root, pages)
	t.Logf("%d output blocks checked by a test, %d abridged", checked, abridged)
	require.NoError(t, err)
}
