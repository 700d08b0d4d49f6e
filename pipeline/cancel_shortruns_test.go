package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A single-worker node fed runs shorter than 8 items (a batch handed over
// early) still looks at the run's context every 8 items it starts: the
// count goes across runs. When each run counted on its own, two runs of 7
// slipped between looks and a cancelled run made 14 more calls.
func TestCancellationStopsCallingUserCodeAcrossShortRuns(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sink", "transform"} {
		for _, batch := range []int{4, 5, 6, 7} {
			t.Run(fmt.Sprintf("%s/batch=%d", kind, batch), func(t *testing.T) {
				t.Parallel()
				worst := int64(0)
				for cancelAt := 8; cancelAt < 40; cancelAt++ {
					const n = 70 * 7
					ctx, cancel := context.WithCancel(t.Context())
					emitted := make(chan struct{})
					var calls, after atomic.Int64
					var cancelled atomic.Bool
					call := func(c context.Context, x int) error {
						if x == 0 {
							<-emitted // every batch was handed over full
						}
						if cancelled.Load() {
							after.Add(1)
						}
						if calls.Add(1) == int64(cancelAt) {
							cancel() // returns before the next call
							cancelled.Store(true)
						}
						return nil
					}
					b := pipeline.New("after7", pipeline.WithHandOverBatch(batch), pipeline.WithBuffer(10*n))
					src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
						defer close(emitted)
						for i := range n {
							if err := out.Emit(ctx, i); err != nil {
								return err
							}
						}
						return nil
					}))
					if kind == "sink" {
						pipeline.Sink(b, "work", src, node.SinkFunc[int](call))
					} else {
						tr := pipeline.Transform(b, "work", src, node.TransformFunc[int, int](func(c context.Context, x int) (int, error) {
							return x, call(c, x)
						}))
						pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
					}
					_, _ = pipelinetest.Start(ctx, build(t, b)).Wait()
					cancel()
					worst = max(worst, after.Load())
				}
				t.Logf("batch %d: most calls of user code after cancel returned: %d", batch, worst)
				assert.LessOrEqual(t, worst, int64(7), "docs: at most 7 more items per worker")
			})
		}
	}
}
