package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

func TestFilterFlatMapUnbatch(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("shapes", m.opts...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20)...))
			even := pipeline.Filter(b, "even", src, func(x int) bool { return x%2 == 0 })
			// x becomes x copies of x: 0 becomes nothing.
			copies := pipeline.FlatMap(b, "copies", even, func(_ context.Context, x int) ([]string, error) {
				out := make([]string, x/2)
				for i := range out {
					out[i] = strconv.Itoa(x)
				}
				return out, nil
			})
			sink := &pipelinetest.Collector[string]{}
			pipeline.Sink(b, "sink", copies, sink)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, []string{"2", "4", "4", "6", "6", "6", "8", "8", "8", "8",
				"10", "10", "10", "10", "10", "12", "12", "12", "12", "12", "12",
				"14", "14", "14", "14", "14", "14", "14", "16", "16", "16", "16", "16", "16", "16", "16",
				"18", "18", "18", "18", "18", "18", "18", "18", "18"}, sink.Items())
			assert.Equal(t, int64(10), nodeOf(t, res, "even").Filtered)
			assert.Equal(t, int64(10), nodeOf(t, res, "even").Out)
			assert.Equal(t, int64(1), nodeOf(t, res, "copies").Filtered, "0 turned into nothing")
			assert.Equal(t, int64(45), nodeOf(t, res, "copies").Out)
		})
	}
}

func TestFlatMapErrorFailsTheNode(t *testing.T) {
	t.Parallel()
	errBad := errors.New("cannot split")
	b := pipeline.New("flat-fail", pipeline.WithResilience(noRetries))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2, 3))
	fm := pipeline.FlatMap(b, "split", src, func(_ context.Context, x int) ([]int, error) {
		if x == 2 {
			return nil, errBad
		}
		return []int{x}, nil
	})
	pipeline.Sink(b, "sink", fm, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, errBad)
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "split", ne.Node)
}

func TestBatchBySizeAndAtTheEnd(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("batch", m.opts...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
			sink := &pipelinetest.Collector[[]int]{}
			batches := pipeline.Batch(b, "batch", src, 4, 0)
			pipeline.Sink(b, "sink", batches, sink)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}, sink.Items())
			assert.Equal(t, int64(10), nodeOf(t, res, "batch").In)
			assert.Equal(t, int64(10), nodeOf(t, res, "batch").Out, "Out counts the items in the batches")
			assert.Equal(t, int64(3), nodeOf(t, res, "batch").OutBatches)
			assert.Equal(t, int64(10), nodeOf(t, res, "sink").In)
			assert.Equal(t, int64(3), nodeOf(t, res, "sink").InBatches)

			b = pipeline.New("roundtrip", m.opts...)
			src = pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
			flat := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", src, 3, 0)), flat)
			_, err = build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, ints(10), flat.Items())
		})
	}
}

func TestBatchLingerWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	feed := make(chan int)
	b := pipeline.New("linger", pipeline.WithClock(clock))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for x := range feed {
			if err := out.Emit(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}))
	got := make(chan []int, 10)
	pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", src, 100, time.Second),
		node.SinkFunc[[]int](func(_ context.Context, v []int) error { got <- v; return nil }))
	run := pipelinetest.Start(t.Context(), build(t, b))

	feed <- 1
	// The linger timer starts with the batch's first item.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second - time.Nanosecond)
	select {
	case v := <-got:
		t.Fatalf("batch %v handed over before its linger", v)
	default:
	}
	clock.Advance(time.Nanosecond)
	assert.Equal(t, []int{1}, <-got)
	feed <- 2
	feed <- 3
	close(feed)
	assert.Equal(t, []int{2, 3}, <-got, "the end of the input hands over what is left")
	_, err := run.Wait()
	require.NoError(t, err)
}

func TestMergeTakesEveryInput(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("merge", m.opts...)
			a := pipeline.Source(b, "a", pipelinetest.NewSliceSource(ints(100)...))
			c := pipeline.Source(b, "c", pipelinetest.NewSliceSource(ints(50)...))
			d := pipeline.Transform(b, "d", pipeline.Source(b, "dsrc", pipelinetest.NewSliceSource(1000, 1001)), double())
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", pipeline.Merge(b, "all", a, c, d), sink)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			got := sink.Items()
			want := append(append(ints(100), ints(50)...), 2000, 2002)
			assert.ElementsMatch(t, want, got)
			assert.Equal(t, int64(152), nodeOf(t, res, "all").Out)
			// Each input's own order is kept.
			var fromA []int
			for _, x := range got {
				if x >= 50 && x < 100 {
					fromA = append(fromA, x)
				}
			}
			assert.True(t, slices.IsSorted(fromA))
		})
	}
}

func TestBroadcastGivesEveryBranchEveryItem(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("broadcast", m.opts...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(300)...))
			left, right := &pipelinetest.Collector[int]{}, &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "left", src, left)
			pipeline.Sink(b, "right", pipeline.Transform(b, "double", src, double()), right)
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, ints(300), left.Items())
			assert.Len(t, right.Items(), 300)
			assert.Equal(t, int64(300), nodeOf(t, res, "src").Out, "Out counts items, not copies")
		})
	}
}
