package pipeline_test

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

func TestMain(m *testing.M) {
	// The signal tests run this binary again as the child they signal.
	if code, ok := signalChildIfAsked(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// modes are the ways stages hand items over; behaviour must be the same in
// each. The small-batch mode crosses batch edges often.
var modes = []struct {
	name string
	opts []pipeline.Option
}{
	{"default", nil},
	{"per-item", []pipeline.Option{pipeline.WithHandOverBatch(1)}},
	{"small-batches", []pipeline.Option{pipeline.WithHandOverBatch(4), pipeline.WithBuffer(8)}},
}

func ints(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func double() node.Transform[int, int] {
	return node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) { return 2 * x, nil })
}

func build(t *testing.T, b *pipeline.Builder) *pipeline.Pipeline {
	t.Helper()
	p, err := b.Build()
	require.NoError(t, err)
	return p
}
