package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A slice a Batch hands on is its consumer's: a part slice that its
// linger handed on, a full one and the last part keep their items once
// the Batch gathers more, and a consumer that appends to one changes no
// other.
func TestBatchSlicesAreTheConsumers(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	feed := make(chan int)
	b := pipeline.New("batch-own", pipeline.WithClock(clock))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for x := range feed {
			if err := out.Emit(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}))
	var (
		mu   sync.Mutex
		kept [][]int
	)
	got := make(chan struct{}, 10)
	pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", src, 8, time.Second),
		node.SinkFunc[[]int](func(_ context.Context, v []int) error {
			mu.Lock()
			kept = append(kept, v)
			mu.Unlock()
			_ = append(v, -1, -1, -1, -1) // writes past len, into v's capacity if it has some
			got <- struct{}{}
			return nil
		}))
	run := pipelinetest.Start(t.Context(), build(t, b))

	feed <- 1
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second)
	<-got // [1], by its linger
	for x := 2; x <= 9; x++ {
		feed <- x
	}
	<-got // [2 … 9], full
	feed <- 10
	close(feed)
	<-got // [10], at the end of the input
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, [][]int{{1}, {2, 3, 4, 5, 6, 7, 8, 9}, {10}}, kept)
}

// A slice that gathers untracked and tracked items, in either order,
// keeps each item's tracker in its place: the tracked items settle with
// their own outcomes, a failed one dead-lettered alone, and every other
// item is handed on, through MapBatch and through Batch.
func TestGatheredSliceOfTrackedAndUntrackedItems(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mapbatch", "batch"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			tracked := pipelinetest.NewTrackedSource(0, 1, 2)
			dlq := deadletter.NewMemory(10)
			// Items handed over one by one: each run the slice gathers is one
			// item, tracked or not.
			b := pipeline.New("mixed", pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
			}))
			in := pipeline.Merge(b, "both",
				pipeline.Source(b, "plain", pipelinetest.NewSliceSource(100, 101, 102)),
				pipeline.Source(b, "tracked", tracked))
			sink := &pipelinetest.Collector[int]{}
			if kind == "mapbatch" {
				out := pipeline.MapBatch(b, "bulk", in, 6, 0, func(_ context.Context, ins []int) ([]int, []error) {
					outs, errs := make([]int, len(ins)), make([]error, len(ins))
					for i, v := range ins {
						outs[i] = v * 10
						if v == 1 || v == 101 {
							errs[i] = resilience.MarkPermanent(errors.New("bad item"))
						}
					}
					return outs, errs
				})
				pipeline.Sink(b, "sink", out, sink)
			} else {
				pipeline.Sink(b, "sink", pipeline.Unbatch(b, "items", pipeline.Batch(b, "batch", in, 6, 0)), sink)
			}
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(t.Context())
			require.NoError(t, err)
			if kind == "mapbatch" {
				assert.ElementsMatch(t, []int{0, 20, 1000, 1020}, sink.Items())
				assert.Len(t, dlq.Envelopes(), 2)
				assert.Equal(t, map[int][]node.Outcome{0: {node.Delivered}, 1: {node.DeadLettered}, 2: {node.Delivered}}, tracked.Outcomes())
			} else {
				assert.ElementsMatch(t, []int{0, 1, 2, 100, 101, 102}, sink.Items())
				assert.Equal(t, map[int][]node.Outcome{0: {node.Delivered}, 1: {node.Delivered}, 2: {node.Delivered}}, tracked.Outcomes())
			}
		})
	}
}
