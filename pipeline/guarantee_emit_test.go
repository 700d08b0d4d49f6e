package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A source that emits with context.Background() (never done) while the
// run is cancelled must not hang.
func TestBackgroundEmitDoesNotHangOnCancel(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, sinks := range []int{1, 2} {
			for _, tracked := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/sinks=%d/tracked=%t", m.name, sinks, tracked), func(t *testing.T) {
					t.Parallel()
					for range 50 {
						ctx, cancel := context.WithCancel(t.Context())
						reached := make(chan struct{})
						b := pipeline.New("bg", m.opts...)
						src := pipeline.Source(b, "src", node.SourceFunc[int](func(_ context.Context, out node.Emitter[int]) error {
							for i := 0; ; i++ {
								var err error
								if tracked {
									err = out.EmitTracked(context.Background(), i, func(node.Outcome) {})
								} else {
									err = out.Emit(context.Background(), i)
								}
								if err != nil {
									return err
								}
							}
						}))
						for k := range sinks {
							pipeline.Sink(b, fmt.Sprint("s", k), src, node.SinkFunc[int](func(ctx context.Context, x int) error {
								if x == 10 && k == 0 {
									close(reached)
								}
								if x >= 10 {
									<-ctx.Done()
									return ctx.Err()
								}
								return nil
							}))
						}
						r := pipelinetest.Start(ctx, build(t, b))
						<-reached
						cancel()
						_, err := r.Wait()
						require.ErrorIs(t, err, context.Canceled)
					}
				})
			}
		}
	}
}
