package main

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/graphdoc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	require.NoError(t, run(t.Context(), &out, path))
	assert.Contains(t, out.String(), "sluice has 6 letters\n")
	assert.Contains(t, out.String(), "gate has 4 letters\n")
	assert.Contains(t, out.String(), "water has 5 letters\n")
	var dead []string
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		dead = append(dead, env.ErrText)
	}
	assert.Equal(t, []string{`"r2d2" is not a word`}, dead)
}

// docs/graph.md embeds the quickstart's graph, and it is what Graph
// renders now.
func TestDocGraph(t *testing.T) {
	p, err := build(io.Discard, deadletter.NewMemory(1))
	require.NoError(t, err)
	graphdoc.Embedded(t, filepath.Join("..", "..", "docs", "graph.md"), "samples/quickstart", p.Graph().Mermaid())
}
