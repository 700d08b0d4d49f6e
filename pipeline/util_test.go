package pipeline_test

import (
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
)

// runtimeGosched lets other goroutines run while a test waits for
// something they do, without sleeping.
func runtimeGosched() { runtime.Gosched() }

// nodeOf returns the counts of the node called name in res, failing the
// test when res has no such node.
func nodeOf(t testing.TB, res pipeline.Result, name string) pipeline.NodeStats {
	t.Helper()
	s, ok := res.Node(name)
	require.Truef(t, ok, "the result has no node %q", name)
	return s
}
