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

// Once the caller's cancel has returned, the engine starts no call of user
// code on a further item: a sink or transform whose call does not watch
// ctx is not called on the rest of the batch it took, and parallel workers
// do not go on through their queues. A worker looks at the run's context
// every 8 items of a run it holds (looking costs more than the rest of a
// cheap item's hand-over), so the bound is 8 calls per worker; before the
// fix a cancelled run made up to 264 more calls. The cancel runs on a goroutine of its
// own, as a caller's would, while the workers go on calling.
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
						var cancelled atomic.Bool
						half := make(chan struct{})
						go func() {
							<-half
							cancel()
							cancelled.Store(true)
						}()
						call := func(c context.Context, x int) error {
							if cancelled.Load() {
								after.Add(1)
							}
							if calls.Add(1) == 50 {
								close(half)
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
					t.Logf("most calls of user code after the caller's cancel returned: %d", worst)
					assert.LessOrEqual(t, worst, int64(8*par), "calls on new items after cancellation")
				})
			}
		}
	}
}
