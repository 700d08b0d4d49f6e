package graphdoc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/graphdoc"
	"github.com/sluicehq/sluice/internal/require"
)

const chart = `flowchart TD
    %% pipeline p
    n0_a(["a #quot;x#quot; #35;1<br>source"]):::source
    n1_b[("b<br>sink")]:::sink
    n0_a -->|"64"| n1_b
    classDef source fill:#e3f2fd
    style n1_b stroke:#c62828
`

func TestParseMermaid(t *testing.T) {
	t.Parallel()
	f, err := graphdoc.ParseMermaid(chart)
	require.NoError(t, err)
	assert.Equal(t, []graphdoc.Node{{"n0_a", "a \"x\" #1\nsource", "source"}, {"n1_b", "b\nsink", "sink"}}, f.Nodes)
	assert.Equal(t, []graphdoc.Edge{{"n0_a", "n1_b", "64"}}, f.Edges)

	for name, bad := range map[string]string{
		"no header":       "    n0(\"a\"):::x\n",
		"raw quote":       "flowchart TD\n    n0[\"a\"b\"]:::x\n",
		"raw <":           "flowchart TD\n    n0[\"<b>\"]:::x\n",
		"raw #":           "flowchart TD\n    n0[\"#1\"]:::x\n",
		"twice":           "flowchart TD\n    n0[\"a\"]:::x\n    n0[\"b\"]:::x\n",
		"undefined edge":  "flowchart TD\n    n0[\"a\"]:::x\n    n0 -->|\"1\"| n1\n",
		"undefined style": "flowchart TD\n    style n3 stroke:#000\n",
		"mismatched":      "flowchart TD\n    n0([\"a\")]:::x\n",
		"other line":      "flowchart TD\n    n0 --- n1\n",
		"comment first":   "%% p\nflowchart TD\n",
	} {
		_, err := graphdoc.ParseMermaid(bad)
		assert.Error(t, err, name)
	}
}

// fakeTB records a Fatalf and ends its goroutine, as testing.T does.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Logf(string, ...any)       {}
func (f *fakeTB) Fatal(args ...any)         { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(s string, a ...any) { f.fatal = fmt.Sprintf(s, a...); runtime.Goexit() }

func embedded(doc, name, mermaid string) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		graphdoc.Embedded(f, doc, name, mermaid)
	}()
	<-done
	return f.fatal
}

func page(t *testing.T, block string) string {
	doc := filepath.Join(t.TempDir(), "graph.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Graphs\n\n<!-- graph: p -->\n```mermaid\n"+block+"```\n\nAfter.\n"), 0o644))
	return doc
}

func TestEmbedded(t *testing.T) {
	doc := page(t, chart)
	assert.Empty(t, embedded(doc, "p", chart))
	assert.Contains(t, embedded(doc, "q", chart), "has no line")
	assert.Contains(t, embedded(doc, "p", "nonsense\n"), "does not parse")

	stale := page(t, "flowchart TD\n")
	assert.Contains(t, embedded(stale, "p", chart), "is stale")

	t.Setenv(graphdoc.UpdateEnv, "1")
	assert.Empty(t, embedded(stale, "p", chart))
	got, err := os.ReadFile(stale)
	require.NoError(t, err)
	assert.Equal(t, "# Graphs\n\n<!-- graph: p -->\n```mermaid\n"+chart+"```\n\nAfter.\n", string(got))
	assert.Empty(t, embedded(stale, "p", chart))
}
