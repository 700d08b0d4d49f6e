package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// counts is the part of a node's stats that the item-count tests compare.
type counts struct {
	In, Out, InBatches, OutBatches, Filtered, DeadLettered, Failed int64
}

func countsOf(s pipeline.NodeStats) counts {
	return counts{s.In, s.Out, s.InBatches, s.OutBatches, s.Filtered, s.DeadLettered, s.Failed}
}

// Every node after a Batch counts the items in the batches, and the
// batches apart, whatever passes the batches on: a transform that keeps
// them slices, a filter, a merge, a route and its branches, a sink.
func TestStatsCountItemsThroughBatch(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			dlq := deadletter.NewMemory(100)
			b := pipeline.New("items", append(m.opts, pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.DeadLetter
			}))...)
			// 0..24 in batches of 5: {0..4} {5..9} {10..14} {15..19} {20..24}.
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(25)...))
			batches := pipeline.Batch(b, "batch", src, 5, 0)
			// Drop the last item of each batch: 5 batches of 4 items.
			trim := pipeline.Map(b, "trim", batches, func(_ context.Context, v []int) ([]int, error) { return v[:len(v)-1], nil })
			// Filter out the batch that starts at 5: 4 items gone.
			kept := pipeline.Filter(b, "keep", trim, func(v []int) bool { return v[0] != 5 })
			// The batch that starts at 10 fails: 4 items dead-lettered.
			checked := pipeline.Map(b, "check", kept, func(_ context.Context, v []int) ([]int, error) {
				if v[0] == 10 {
					return nil, resilience.MarkPermanent(errors.New("bad batch"))
				}
				return v, nil
			})
			// A second stream of batches, merged in: {100, 101}.
			other := pipeline.Batch(b, "batch2", pipeline.Source(b, "src2", pipelinetest.NewSliceSource(100, 101)), 2, 0)
			merged := pipeline.Merge(b, "merge", checked, other)
			branches := pipeline.Route(b, "route", merged, 2, func(v []int) int { return v[0] % 2 })
			even, odd := &pipelinetest.Collector[[]int]{}, &pipelinetest.Collector[[]int]{}
			pipeline.Sink(b, "even", branches[0], even)
			pipeline.Sink(b, "odd", branches[1], odd)

			pl := build(t, b)
			res, err := pl.Run(t.Context())
			require.NoError(t, err)
			// Batches reaching the route: {0..3} {15..18} {20..23} and {100,101}.
			assert.ElementsMatch(t, [][]int{{0, 1, 2, 3}, {20, 21, 22, 23}, {100, 101}}, even.Items())
			assert.ElementsMatch(t, [][]int{{15, 16, 17, 18}}, odd.Items())
			assert.Len(t, dlq.Envelopes(), 1, "one batch is one dead letter")

			want := map[string]counts{
				"src":    {Out: 25},
				"batch":  {In: 25, Out: 25, OutBatches: 5},
				"trim":   {In: 25, Out: 20, InBatches: 5, OutBatches: 5},
				"keep":   {In: 20, Out: 16, InBatches: 5, OutBatches: 4, Filtered: 4},
				"check":  {In: 16, Out: 12, InBatches: 4, OutBatches: 3, DeadLettered: 4, Failed: 4},
				"src2":   {Out: 2},
				"batch2": {In: 2, Out: 2, OutBatches: 1},
				"merge":  {In: 14, Out: 14, InBatches: 4, OutBatches: 4},
				"route":  {In: 14, Out: 14, InBatches: 4, OutBatches: 4},
				// Each branch is handed its own batches alone.
				"route[0]": {In: 10, Out: 10, InBatches: 3, OutBatches: 3},
				"route[1]": {In: 4, Out: 4, InBatches: 1, OutBatches: 1},
				"even":     {In: 10, Out: 10, InBatches: 3, OutBatches: 3},
				"odd":      {In: 4, Out: 4, InBatches: 1, OutBatches: 1},
			}
			for _, n := range res.Nodes {
				assert.Equal(t, want[n.Node], countsOf(n), "node %s", n.Node)
			}
			// The live counters say the same once the run ended.
			for _, n := range pl.Stats().Nodes {
				assert.Equal(t, want[n.Node], countsOf(n), "live node %s", n.Node)
			}
		})
	}
}

// Nodes that turn batches into something else count the items they take
// and what they hand on: an Unbatch, a FlatMap, a transform to a
// non-slice, a sink that skips. A merge of batches with plain items is not
// a stream of batches.
func TestStatsCountItemsIntoOtherShapes(t *testing.T) {
	t.Parallel()
	b := pipeline.New("shapes", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
	}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(12)...))
	batches := pipeline.Batch(b, "batch", src, 4, 0)
	// Broadcast: the batches go to four consumers.
	flat := pipeline.Unbatch(b, "unbatch", batches)
	sums := pipeline.Map(b, "sum", batches, func(_ context.Context, v []int) (int, error) {
		s := 0
		for _, x := range v {
			s += x
		}
		return s, nil
	})
	// A FlatMap that turns the batch starting at 4 into nothing.
	halves := pipeline.FlatMap(b, "halves", batches, func(_ context.Context, v []int) ([]int, error) {
		if v[0] == 4 {
			return nil, nil
		}
		return []int{v[0], v[2]}, nil
	})
	// A sink that skips the batch starting at 8.
	pipeline.ForEach(b, "picky", batches, func(_ context.Context, v []int) error {
		if v[0] == 8 {
			return resilience.MarkPermanent(errors.New("no"))
		}
		return nil
	})
	// Plain ints merged with ints: nothing here is a batch.
	mixed := pipeline.Merge(b, "mixed", flat, sums)
	all := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "all", pipeline.Merge(b, "all-in", mixed, halves), all)

	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Len(t, all.Items(), 12+3+4)
	want := map[string]counts{
		"src":     {Out: 12},
		"batch":   {In: 12, Out: 12, OutBatches: 3},
		"unbatch": {In: 12, Out: 12, InBatches: 3},
		"sum":     {In: 12, Out: 3, InBatches: 3},
		"halves":  {In: 12, Out: 4, InBatches: 3, Filtered: 4},
		"picky":   {In: 12, Out: 8, InBatches: 3, OutBatches: 2, Failed: 4},
		"mixed":   {In: 15, Out: 15},
		"all-in":  {In: 19, Out: 19},
		"all":     {In: 19, Out: 19},
	}
	for _, n := range res.Nodes {
		assert.Equal(t, want[n.Node], countsOf(n), "node %s", n.Node)
	}
	assert.Equal(t, int64(4), nodeOf(t, res, "picky").Skipped, "a skipped batch skips its items")
	assert.Contains(t, res.String(), "batches", "the table shows the batch counts when there are any")
}

// A source whose items happen to be slices is not a stream of batches:
// each slice is one item.
func TestStatsSlicesFromASourceAreItems(t *testing.T) {
	t.Parallel()
	b := pipeline.New("slices")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource([]int{1, 2, 3}, []int{4}))
	out := &pipelinetest.Collector[[]int]{}
	pipeline.Sink(b, "sink", pipeline.Map(b, "id", src, func(_ context.Context, v []int) ([]int, error) { return v, nil }), out)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	for _, n := range res.Nodes[1:] {
		assert.Equal(t, int64(2), n.In, "node %s", n.Node)
		assert.Zero(t, n.InBatches+n.OutBatches, "node %s", n.Node)
	}
	assert.NotContains(t, res.String(), "batches")
}

// While a sink holds a batch, its in-flight count is the batch's items; a
// transform that takes batches has none, since what it returns may hold
// fewer items or none, whether a slice or something else.
func TestStatsInFlightOfABatch(t *testing.T) {
	t.Parallel()
	for _, holder := range []string{"sink", "to-slice", "to-int"} {
		b := pipeline.New("inflight")
		src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(100)...))
		batches := pipeline.Batch(b, "batch", src, 100, 0)
		entered, release := make(chan struct{}), make(chan struct{})
		hold := func() { close(entered); <-release }
		switch holder {
		case "sink":
			pipeline.ForEach(b, "hold", batches, func(context.Context, []int) error { hold(); return nil })
		case "to-slice":
			out := pipeline.Map(b, "hold", batches, func(_ context.Context, v []int) ([]int, error) { hold(); return v, nil })
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[[]int]{})
		default:
			out := pipeline.Map(b, "hold", batches, func(_ context.Context, v []int) (int, error) { hold(); return len(v), nil })
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		}
		p := build(t, b)
		done := make(chan error, 1)
		go func() { _, err := p.Run(t.Context()); done <- err }()
		<-entered
		st, ok := p.Stats().Node("hold")
		require.True(t, ok)
		assert.Equal(t, int64(100), st.In)
		assert.Equal(t, int64(1), st.InBatches)
		if holder == "sink" {
			assert.Equal(t, int64(100), st.InFlight, "a batch held counts its items in flight")
		} else {
			assert.Zero(t, st.InFlight, "%s: a transform of batches has no in-flight count", holder)
		}
		close(release)
		require.NoError(t, <-done)
	}
}
