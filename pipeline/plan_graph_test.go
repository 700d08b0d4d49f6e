package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Plan and Graph say the same about where each layer can act: item retry,
// node retry, the attempt timeout and a pausing breaker show in Plan for a
// node exactly when the graph lists them for it. A Batch, an Unbatch, a
// Merge, a Route's branches and a Join's tagging nodes call no function of
// yours that can fail, so no layer that acts on calls shows for them.
func TestPlanAgreesWithTheGraph(t *testing.T) {
	t.Parallel()
	b := pipeline.New("kinds", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.AttemptTimeout = time.Second
		o.NodeRetry.MaxRetries = 2
		o.CircuitBreaker.Enabled = true
		o.CircuitBreaker.WhenOpen = resilience.OpenPause
	}))
	shopped, _ := shop(t, 1) // its nodes under the default profile
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1))
	mapped := pipeline.Transform(b, "call", src, double())
	kept := pipeline.Filter(b, "keep", mapped, func(x int) bool { return x > 0 })
	flat := pipeline.FlatMap(b, "flat", kept, func(_ context.Context, x int) ([]int, error) { return []int{x}, nil })
	batched := pipeline.Batch(b, "batch", flat, 10, 0)
	items := pipeline.Unbatch(b, "unbatch", batched)
	yes, no := pipeline.Split(b, "split", items, func(x int) bool { return x%2 == 0 })
	merged := pipeline.Merge(b, "merge", yes, no)
	wins := pipeline.Aggregate(b, "sum", merged, func(int) int { return 0 }, pipeline.CountWindow(2), zero, sum)
	totals := pipeline.Map(b, "total", wins, func(_ context.Context, w pipeline.Window[int, int]) (int, error) { return w.Value, nil })
	joined := pipeline.Join(b, "pair", totals, pipeline.Source(b, "other", pipelinetest.NewSliceSource(1)),
		func(x int) int { return x }, func(x int) int { return x }, time.Minute, func(l, r int) int { return l + r })
	pipeline.ForEach(b, "store", joined, func(context.Context, int) error { return nil })

	kinds := build(t, b)
	for _, p := range []*pipeline.Pipeline{kinds, shopped} {
		g := p.Graph()
		plan := p.Plan()
		require.Len(t, plan.Nodes, len(g.Nodes))
		for i, np := range plan.Nodes {
			gn := g.Nodes[i]
			require.Equal(t, gn.Name, np.Node)
			has := func(prefix string) bool {
				for _, l := range gn.Layers {
					if strings.HasPrefix(l, prefix) {
						return true
					}
				}
				return false
			}
			assert.Equal(t, has("retry "), np.ItemCalls > 1, "%s (%s): item retries in the graph %v, Plan's calls/item %d", np.Node, np.Kind, gn.Layers, np.ItemCalls)
			assert.Equal(t, has("node retry "), np.Starts > 1, "%s (%s): node retry in the graph %v, Plan's starts %d", np.Node, np.Kind, gn.Layers, np.Starts)
			assert.Equal(t, has("timeout "), np.AttemptTimeout > 0, "%s (%s): attempt timeout in the graph %v, Plan's %v", np.Node, np.Kind, gn.Layers, np.AttemptTimeout)
			if np.Pause > 0 {
				assert.True(t, has("breaker"), "%s (%s): no breaker in the graph %v, Plan's pause %v", np.Node, np.Kind, gn.Layers, np.Pause)
			}
			if np.ItemCalls == 0 && np.Kind != pipeline.KindSource {
				assert.Zero(t, np.AllCalls, np.Node)
				assert.Zero(t, np.ItemPause, np.Node)
			}
		}
		assert.Regexp(t, `\nbatch\s+batch\s+-\s`, plan.String(), "no calls for a batch")
	}
}
