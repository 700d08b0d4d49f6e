package pipeline_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A source's Tracked and Settled count its tracked items, and those whose
// fate is final, once each whatever the graph makes of them: the parts of
// a FlatMap, the copies of a broadcast, the windows of an Aggregate. The
// sink holds its first write until the test has read the counts, so they
// are read mid-run; untracked items count in neither.
func TestSourceCountsSettledTrackedItems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		graph func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int]))
	}{
		{"straight", func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) { sink(src) }},
		{"flatmap", func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			sink(pipeline.FlatMap(b, "explode", src, func(_ context.Context, v int) ([]int, error) { return make([]int, 10), nil }))
		}},
		{"broadcast", func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			pipeline.Sink(b, "fast", src, node.SinkFunc[int](func(context.Context, int) error { return nil }))
			sink(src)
		}},
		{"aggregate", func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			agg := pipeline.Aggregate(b, "sum", src, func(int) int { return 0 }, pipeline.CountWindow(10),
				func() int { return 0 }, func(a, v int) int { return a + 1 })
			sink(pipeline.Map(b, "unwrap", agg, func(_ context.Context, w pipeline.Window[int, int]) (int, error) { return w.Value, nil }))
		}},
	} {
		for _, n := range []int{0, 1, 10, 95} {
			for _, tracked := range []bool{true, false} {
				t.Run(tc.name, func(t *testing.T) {
					b := pipeline.New("p")
					src := &pipelinetest.SliceSource[int]{Items: make([]int, n), Tracked: tracked}
					first, release := make(chan struct{}), make(chan struct{})
					var writes int
					tc.graph(b, pipeline.Source[int](b, "read", src), func(s pipeline.Stream[int]) {
						pipeline.Sink(b, "store", s, node.SinkFunc[int](func(ctx context.Context, _ int) error {
							if writes++; writes == 1 {
								close(first)
								<-release
							}
							return nil
						}))
					})
					p, err := b.Build()
					require.NoError(t, err)
					run := pipelinetest.Start(t.Context(), p)
					if n > 0 {
						<-first
						st := p.Stats().Nodes[0]
						assert.LessOrEqual(t, st.Settled, st.Tracked)
						if tracked {
							assert.Less(t, st.Settled, int64(n), "the sink holds its first write: not every item settled")
						} else {
							assert.Zero(t, st.Tracked)
						}
					}
					close(release)
					res, err := run.Wait()
					require.NoError(t, err)
					want := int64(0)
					if tracked {
						want = int64(n)
					}
					for _, st := range []pipeline.NodeStats{res.Nodes[0], p.Stats().Nodes[0]} {
						assert.Equal(t, want, st.Tracked, "tracked")
						assert.Equal(t, want, st.Settled, "settled")
					}
					for _, st := range res.Nodes[1:] {
						assert.Zero(t, st.Tracked+st.Settled, "%s: only sources count", st.Node)
					}
				})
			}
		}
	}
}
