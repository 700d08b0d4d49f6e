package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Parallel restarts with replay windows big enough for the ring to grow
// and wrap (above its first 64 entries), many items in flight, with skips
// mixed in: every item is handed on once, and its outcome reported once.
func TestParallelRestartWindowGrowsAndWraps(t *testing.T) {
	t.Parallel()
	const items = 2000
	for _, unordered := range []bool{false, true} {
		for _, m := range modes {
			t.Run(fmt.Sprintf("unordered=%t/%s", unordered, m.name), func(t *testing.T) {
				t.Parallel()
				for it := range 4 {
					rng := rand.New(rand.NewPCG(uint64(it), 5))
					s := &script{fails: map[int]int{}, panic: map[int]bool{}, calls: map[int]int{}}
					skip := map[int]bool{}
					for i := range items {
						switch rng.IntN(40) {
						case 0:
							s.fails[i] = 1
							s.panic[i] = rng.IntN(2) == 0
						case 1:
							skip[i] = true
						}
					}
					window := 65 + rng.IntN(200)
					b := pipeline.New("r2p", append([]pipeline.Option{pipeline.WithBuffer(512), pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 0
						o.NodeRestart.MaxRestarts = 100
						o.NodeRestart.MaxReplayWindow = window
						o.NodeRestart.Backoff = resilience.NoBackoff()
						o.NodeRestart.ResetAfterItems = 1
						o.NodeRetry.MaxRetries = 0
					})}, m.opts...)...)
					src := pipelinetest.NewTrackedSource(ints(items)...)
					opts := []pipeline.NodeOption{pipeline.Parallel(4), pipeline.NodeResilience(func(o *resilience.Options) {
						// skip items go through a rule that skips permanent
						// rejections; restarts for flaky ones
					})}
					if unordered {
						opts = append(opts, pipeline.Unordered())
					}
					var mu sync.Mutex
					var got []int
					out := pipeline.FlatMap(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) ([]int, error) {
						if x%7 == 0 {
							runtime.Gosched()
						}
						if err := s.hit(x); err != nil {
							return nil, err
						}
						if skip[x] {
							return nil, nil // filtered
						}
						return []int{x}, nil
					}, opts...)
					pipeline.Sink(b, "sink", out, node.SinkFunc[int](func(_ context.Context, x int) error {
						mu.Lock()
						got = append(got, x)
						mu.Unlock()
						return nil
					}))
					_, err := build(t, b).Run(t.Context())
					require.NoError(t, err, "iteration %d", it)
					var want []int
					for i := range items {
						if !skip[i] {
							want = append(want, i)
						}
					}
					mu.Lock()
					g := slices.Clone(got)
					mu.Unlock()
					if !unordered {
						require.Equal(t, want, g, "iteration %d order", it)
					}
					slices.Sort(g)
					require.Equal(t, want, g, "iteration %d once", it)
					outs := src.Outcomes()
					for i := range items {
						w := node.Delivered
						if skip[i] {
							w = node.Filtered
						}
						require.Equal(t, []node.Outcome{w}, outs[i], "iteration %d item %d", it, i)
					}
				}
			})
		}
	}
}
