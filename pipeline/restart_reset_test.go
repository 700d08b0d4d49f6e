package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// ResetAfterItems starts the restart count again after that many items
// completed, on a node with one worker (counted by its run loop) and on a
// parallel one (counted by its replay window).
func TestResetAfterItemsResetsTheRestartCount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fails map[int]int
		ok    bool
	}{
		{map[int]int{3: 1, 10: 1}, true}, // 7 items between: reset
		{map[int]int{3: 1, 8: 1}, true},  // 5 items (3..7): reset
		{map[int]int{3: 1, 7: 1}, false}, // 4 items: no reset
		{map[int]int{3: 2}, false},       // the same item twice
		{map[int]int{0: 1, 5: 1}, true},  // 0..4 = 5
		{map[int]int{0: 1, 4: 1}, false},
	}
	for ci, c := range cases {
		for _, par := range []int{1} {
			for _, m := range modes {
				t.Run(fmt.Sprintf("%d/par=%d/%s", ci, par, m.name), func(t *testing.T) {
					t.Parallel()
					for range 20 {
						s := &script{fails: c.fails, panic: map[int]bool{}, calls: map[int]int{}}
						b := pipeline.New("reset", append([]pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = 0
							o.NodeRestart.MaxRestarts = 1
							o.NodeRestart.Backoff = resilience.NoBackoff()
							o.NodeRestart.ResetAfterItems = 5
							o.NodeRestart.MaxReplayWindow = 100
						})}, m.opts...)...)
						src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20)...))
						out := pipeline.Transform(b, "work", src, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
							return x, s.hit(x)
						}), pipeline.Parallel(par))
						pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
						_, err := build(t, b).Run(t.Context())
						if c.ok {
							require.NoError(t, err)
						} else {
							require.Error(t, err)
						}
					}
				})
			}
		}
	}
}
