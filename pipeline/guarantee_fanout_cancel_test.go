package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A run cancelled at a random moment while a broadcast source drains owed
// items, through parallel branches: Run returns, every done runs once.
func TestCancelMidDrainOfABroadcast(t *testing.T) {
	t.Parallel()
	const items = 400
	for _, m := range modes {
		for _, par := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/par=%d", m.name, par), func(t *testing.T) {
				t.Parallel()
				for it := range 30 {
					rng := rand.New(rand.NewPCG(uint64(it), 11))
					var mu sync.Mutex
					outcomes := map[int][]node.Outcome{}
					emitted := map[int]bool{}
					ctx, cancel := context.WithCancel(t.Context())
					var written atomic.Int64
					cancelAt := int64(rng.IntN(items))
					b := pipeline.New("cancel-fan", append([]pipeline.Option{pipeline.WithBuffer(4)}, m.opts...)...)
					src := pipeline.Source(b, "src", node.SourceFunc[int](func(sctx context.Context, out node.Emitter[int]) error {
						for i := range items {
							call, stop := sctx, func() {}
							if rng.IntN(4) == 0 {
								call, stop = cancelSoon(sctx, rng.IntN(10))
							}
							err := out.EmitTracked(call, i, func(o node.Outcome) {
								mu.Lock()
								outcomes[i] = append(outcomes[i], o)
								mu.Unlock()
							})
							stop()
							mu.Lock()
							emitted[i] = true
							mu.Unlock()
							if err != nil && sctx.Err() != nil {
								return err
							}
						}
						return nil
					}))
					sinkFn := func(_ context.Context, x int) error {
						if written.Add(1) == cancelAt {
							cancel()
						}
						runtime.Gosched()
						return nil
					}
					a := pipeline.Transform(b, "a", src, double(), pipeline.Parallel(par))
					pipeline.Sink(b, "sa", a, node.SinkFunc[int](sinkFn))
					f := pipeline.Filter(b, "f", src, func(x int) bool { return x%3 != 0 }, pipeline.Parallel(par), pipeline.Unordered())
					pipeline.Sink(b, "sb", f, node.SinkFunc[int](sinkFn), pipeline.Parallel(par))
					r := pipelinetest.Start(ctx, build(t, b))
					_, _ = r.Wait()
					cancel()
					mu.Lock()
					for i := range emitted {
						require.Len(t, outcomes[i], 1, "iteration %d item %d: %v", it, i, outcomes[i])
					}
					mu.Unlock()
				}
			})
		}
	}
}
