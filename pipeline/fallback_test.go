package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A Fallback rescues an item that layer 1 gave up on: its result is handed
// on, the item is Delivered, and the node counts it; a fallback that fails
// or panics leaves the item to its failure action, with both errors.
func TestFallback(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 3} {
		for range 10 {
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("fallback", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 1
				o.ItemRetry.Backoff = resilience.NoBackoff()
				o.OnItemFailure = resilience.DeadLetter
			}))
			src := pipelinetest.NewTrackedSource(ints(8)...)
			faults := pipelinetest.NewFaults(map[int][]error{3: {errFlaky, errFlaky}, 5: {errOther}, 6: {errOther}})
			var cause error
			out := pipeline.Transform[int, int](b, "price", pipeline.Source[int](b, "src", src), faults, pipeline.Parallel(par),
				pipeline.Fallback(func(_ context.Context, x int, err error) (int, error) {
					switch x {
					case 5:
						return 0, errors.New("no cached price")
					case 6:
						panic("fallback bug")
					}
					cause = err
					return -x, nil
				}))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, sink)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Contains(t, sink.Items(), -3, "the fallback's result is handed on")
			assert.ErrorIs(t, cause, resilience.ErrRetryExhausted, "it gets the error layer 1 gave up with")
			outcomes := once(t, src, 8)
			assert.Equal(t, node.Delivered, outcomes[3])
			assert.Equal(t, node.DeadLettered, outcomes[5])
			assert.Equal(t, node.DeadLettered, outcomes[6])
			assert.Equal(t, int64(1), nodeOf(t, res, "price").Fallbacks)
			assert.Equal(t, int64(2), nodeOf(t, res, "price").Failed, "the items the fallback did not rescue")
			assert.Equal(t, int64(6), nodeOf(t, res, "price").Out)
			for _, env := range dlq.Envelopes() {
				assert.ErrorIs(t, env.Err, errOther)
				assert.Contains(t, env.ErrText, "fallback: ")
			}
		}
	}
}

// A fallback of the wrong types, or on a node that is not a transform, is
// a Build error naming the node.
func TestFallbackBadInput(t *testing.T) {
	t.Parallel()
	b := pipeline.New("fallback")
	out := pipeline.Transform(b, "price", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), double(),
		pipeline.Fallback(func(context.Context, string, error) (int, error) { return 0, nil }))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{}, pipeline.Fallback(func(context.Context, int, error) (int, error) { return 0, nil }))
	_, err := b.Build()
	assert.ErrorContains(t, err, `node "price": Fallback: the node needs a func(context.Context, int, error) (int, error), not a func(context.Context, string, error) (int, error)`)
	assert.ErrorContains(t, err, `node "sink": Fallback: only a transform has one, not a sink`)
	b = pipeline.New("fallback")
	out = pipeline.Transform(b, "price", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), double(),
		pipeline.Fallback[int, int](nil))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	_, err = b.Build()
	assert.ErrorContains(t, err, `node "price": Fallback: the function is nil`)
}
