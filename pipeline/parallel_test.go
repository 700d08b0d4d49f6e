package pipeline_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// sleepy returns a transform that waits a random time on clock before
// passing each item on, so that parallel workers finish out of order.
func sleepy(clock clockwork.Clock, seed uint64, n int) node.Transform[int, int] {
	r := rand.New(rand.NewPCG(seed, seed))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(r.IntN(10)) * time.Millisecond
	}
	return node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if d := delays[x]; d > 0 {
			select {
			case <-clock.After(d):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return x, nil
	})
}

func TestParallelKeepsOrderUnderRandomDelays(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, workers := range []int{2, 5} {
			t.Run(m.name, func(t *testing.T) {
				t.Parallel()
				const n = 300
				clock := clockwork.NewFakeClock()
				b := pipeline.New("ordered", append(m.opts, pipeline.WithClock(clock))...)
				src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...))
				slow := pipeline.Transform(b, "slow", src, sleepy(clock, uint64(workers), n), pipeline.Parallel(workers))
				sink := &pipelinetest.Collector[int]{}
				pipeline.Sink(b, "sink", slow, sink)
				run := pipelinetest.Start(t.Context(), build(t, b))
				_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Millisecond)
				require.NoError(t, err)
				assert.Equal(t, ints(n), sink.Items())
			})
		}
	}
}

func TestUnorderedDeliversEverything(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			const n = 300
			clock := clockwork.NewFakeClock()
			b := pipeline.New("unordered", append(m.opts, pipeline.WithClock(clock))...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...))
			slow := pipeline.Transform(b, "slow", src, sleepy(clock, 3, n), pipeline.Parallel(4), pipeline.Unordered())
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", slow, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Millisecond)
			require.NoError(t, err)
			got := sink.Items()
			assert.ElementsMatch(t, ints(n), got)
			assert.False(t, slices.IsSorted(got), "items that wait less overtake: the order changes")
			assert.Equal(t, int64(n), nodeOf(t, res, "slow").Out)
		})
	}
}

func TestParallelSinkAndFilter(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("psink", m.opts...)
			src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(1000)...))
			odd := pipeline.Filter(b, "odd", src, func(x int) bool { return x%2 == 1 }, pipeline.Parallel(3))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", odd, sink, pipeline.Parallel(4))
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			var want []int
			for i := 1; i < 1000; i += 2 {
				want = append(want, i)
			}
			assert.ElementsMatch(t, want, sink.Items())
			assert.Equal(t, int64(500), nodeOf(t, res, "odd").Filtered)
			assert.Equal(t, int64(500), nodeOf(t, res, "sink").Out)
		})
	}
}

// TestSlowSinkBoundsWhatIsInFlight checks backpressure: handing over item
// by item with buffers of 2, the source can be at most a fixed number of
// items ahead of a blocked sink.
func TestSlowSinkBoundsWhatIsInFlight(t *testing.T) {
	t.Parallel()
	// Held at once: 1 by the sink, 2 in its buffer, 1 by the transform, 2
	// in its buffer; the source's next Emit blocks.
	const bound = 6
	var emitted, written atomic.Int64
	emits := make(chan struct{}, 1000)
	release := make(chan struct{})
	b := pipeline.New("backpressure", pipeline.WithBuffer(2), pipeline.WithHandOverBatch(1))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range 1000 {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			emitted.Add(1)
			emits <- struct{}{}
		}
		return nil
	}))
	var maxAhead atomic.Int64
	sink := node.SinkFunc[int](func(ctx context.Context, x int) error {
		if x == 0 {
			<-release
		}
		ahead := emitted.Load() - written.Add(1)
		if ahead > maxAhead.Load() {
			maxAhead.Store(ahead)
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Transform(b, "double", src, double()), sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	for range bound {
		<-emits
	}
	// The sink is blocked on item 0 and the pipeline is full: the source
	// has emitted exactly bound items. Stats shows the same.
	assert.Equal(t, int64(bound), emitted.Load())
	close(release)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, int64(1000), written.Load())
	assert.LessOrEqual(t, maxAhead.Load(), int64(bound), "the source never ran further ahead of the sink")
}

// TestSlowSinkBoundsWhatIsInFlightInBatches is the same with batches of 4
// and buffers of 8 items (2 batches): each stage holds at most a batch it
// reads, a batch it gathers and two batches in front of the next.
func TestSlowSinkBoundsWhatIsInFlightInBatches(t *testing.T) {
	t.Parallel()
	const bound = 4 + 8 + 4 + 4 + 8 + 4
	var emitted, written, maxAhead atomic.Int64
	b := pipeline.New("backpressure", pipeline.WithBuffer(8), pipeline.WithHandOverBatch(4))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range 5000 {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			emitted.Add(1)
		}
		return nil
	}))
	sink := node.SinkFunc[int](func(ctx context.Context, x int) error {
		ahead := emitted.Load() - written.Add(1)
		if ahead > maxAhead.Load() {
			maxAhead.Store(ahead)
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Transform(b, "double", src, double()), sink)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(5000), written.Load())
	assert.LessOrEqual(t, maxAhead.Load(), int64(bound))
}
