package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A call that returns the echo of the caller's cancellation is never the
// item's failure, whichever of the run's contexts the cancellation
// reached first: the calls get a sibling of the run's context, and the
// order in which cancelling the caller's ends the two is not set. Each
// node kind that calls user code runs many times, with every item
// already emitted by a source that has finished, so that only the node
// can report the cancellation.
func TestCancelEchoIsNotTheItemsFailure(t *testing.T) {
	t.Parallel()
	// waits is a user function that returns, for each item, the error of
	// its context once it ends.
	kinds := map[string]func(b *pipeline.Builder, in pipeline.Stream[int], entered chan<- struct{}){
		"Map": func(b *pipeline.Builder, in pipeline.Stream[int], entered chan<- struct{}) {
			out := pipeline.Map(b, "node", in, func(ctx context.Context, v int) (int, error) {
				entered <- struct{}{}
				<-ctx.Done()
				return 0, ctx.Err()
			})
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
		"Sink": func(b *pipeline.Builder, in pipeline.Stream[int], entered chan<- struct{}) {
			pipeline.Sink(b, "node", in, node.SinkFunc[int](func(ctx context.Context, v int) error {
				entered <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}))
		},
		"MapBatch": func(b *pipeline.Builder, in pipeline.Stream[int], entered chan<- struct{}) {
			out := pipeline.MapBatch(b, "node", in, 2, 0, func(ctx context.Context, ins []int) ([]int, []error) {
				entered <- struct{}{}
				<-ctx.Done()
				errs := make([]error, len(ins))
				for i := range errs {
					errs[i] = ctx.Err()
				}
				return make([]int, len(ins)), errs
			})
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		},
	}
	for name, build := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := range 100 {
				dlq := deadletter.NewMemory(10)
				src := pipelinetest.NewTrackedSource(ints(2)...)
				entered := make(chan struct{}, 2)
				b := pipeline.New(fmt.Sprintf("echo-%d", i), pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Classifier = resilience.AllTransient()
					o.OnItemFailure = resilience.DeadLetter
				}))
				build(b, pipeline.Source(b, "src", src), entered)
				p, err := b.Build()
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				run := pipelinetest.Start(ctx, p)
				<-entered
				cancel()
				res, err := run.Wait()
				require.ErrorIs(t, err, context.Canceled, "run %d", i)
				require.Empty(t, dlq.Envelopes(), "run %d", i)
				st := nodeOf(t, res, "node")
				require.Zero(t, st.Failed, "run %d", i)
				require.Zero(t, st.ItemRetries, "run %d", i)
				for j, o := range src.Outcomes() {
					require.NotContains(t, o, node.DeadLettered, "run %d item %d", i, j)
				}
			}
		})
	}
}
