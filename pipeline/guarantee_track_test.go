package pipeline_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Batch, then broadcast of the batches, then Unbatch on each branch, a
// filter on one and a dead-lettering check on the other, plus a branch
// that writes whole batches.
func TestBroadcastOfBatchesThenUnbatch(t *testing.T) {
	t.Parallel()
	const n = 100
	for _, m := range modes {
		for _, par := range []int{1, 3} {
			t.Run(m.name, func(t *testing.T) {
				t.Parallel()
				for range 20 {
					dlq := deadletter.NewMemory(n)
					b := pipeline.New("bb", slices.Concat(m.opts, []pipeline.Option{pipeline.WithDeadLetter(dlq)})...)
					src := pipelinetest.NewTrackedSource(ints(n)...)
					bt := pipeline.Batch(b, "batch", pipeline.Source[int](b, "src", src), 7, 0)
					ua := pipeline.Unbatch(b, "ua", bt)
					fa := pipeline.Filter(b, "odd-out", ua, func(x int) bool { return x%2 == 0 }, pipeline.Parallel(par))
					pipeline.Sink(b, "a", fa, &pipelinetest.Collector[int]{})
					ub := pipeline.Unbatch(b, "ub", bt)
					ck := pipeline.Transform[int, int](b, "check", ub, pipelinetest.FailAlways(errRejected, 10, 11, 55),
						pipeline.Parallel(par), pipeline.NodeResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = 0
							o.OnItemFailure = resilience.DeadLetter
						}))
					pipeline.Sink(b, "b", ck, &pipelinetest.Collector[int]{})
					pipeline.Sink(b, "whole", bt, &pipelinetest.Collector[[]int]{})
					_, err := build(t, b).Run(t.Context())
					require.NoError(t, err)
					want := make([]node.Outcome, n)
					for i := range want {
						want[i] = node.Delivered
						if i == 10 || i == 11 || i == 55 {
							want[i] = node.DeadLettered
						}
					}
					assert.Equal(t, want, once(t, src, n))
				}
			})
		}
	}
}

// A FlatMap that turns each item into one item and an Unbatch-like
// FlatMap of batches of one: the length-1 positional rule.
func TestFlatMapOfTheSameLengthOnABatchOfOne(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		b := pipeline.New("one", m.opts...)
		src := pipelinetest.NewTrackedSource(ints(20)...)
		bt := pipeline.Batch(b, "batch", pipeline.Source[int](b, "src", src), 1, 0)
		fm := pipeline.FlatMap(b, "fm", bt, func(_ context.Context, xs []int) ([]int, error) { return xs, nil })
		f := pipeline.Filter(b, "f", fm, func(x int) bool { return x != 3 })
		pipeline.Sink(b, "s", f, &pipelinetest.Collector[int]{})
		_, err := build(t, b).Run(t.Context())
		require.NoError(t, err)
		out := once(t, src, 20)
		assert.Equal(t, node.Filtered, out[3])
		assert.Equal(t, node.Delivered, out[4])
	}
}
