package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Once the caller cancels, the engine calls no user code on further items:
// a sink or transform whose call does not watch ctx is not called on the
// rest of the batch it took, and parallel workers do not go on through
// their queues. A worker may start a call while the cancellation is on its
// way to it, so the bound is two calls per worker; before the fix a
// cancelled run made up to 142 more calls.
func TestCancellationStopsCallingUserCode(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, par := range []int{1, 4} {
			for _, kind := range []string{"sink", "transform"} {
				t.Run(fmt.Sprintf("%s/%s/par=%d", kind, m.name, par), func(t *testing.T) {
					t.Parallel()
					worst := int64(0)
					for range 20 {
						ctx, cancel := context.WithCancel(t.Context())
						var calls, after atomic.Int64
						call := func(c context.Context, x int) error {
							if ctx.Err() != nil {
								after.Add(1)
							}
							if calls.Add(1) == 50 {
								cancel()
							}
							return nil
						}
						b := pipeline.New("after", m.opts...)
						src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(5000)...))
						opts := []pipeline.NodeOption{pipeline.Parallel(par)}
						if kind == "sink" {
							pipeline.Sink(b, "work", src, node.SinkFunc[int](call), opts...)
						} else {
							tr := pipeline.Transform(b, "work", src, node.TransformFunc[int, int](func(c context.Context, x int) (int, error) {
								return x, call(c, x)
							}), opts...)
							pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
						}
						r := pipelinetest.Start(ctx, build(t, b))
						_, _ = r.Wait()
						cancel()
						worst = max(worst, after.Load())
					}
					t.Logf("most calls of user code after the caller cancelled: %d", worst)
					assert.LessOrEqual(t, worst, int64(2*par), "calls on new items after cancellation")
				})
			}
		}
	}
}
