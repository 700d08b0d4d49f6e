package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// once turns the outcomes a tracked source saw into one per item, failing
// the test when an item had none or more than one.
func once(t *testing.T, src *pipelinetest.SliceSource[int], n int) []node.Outcome {
	t.Helper()
	got := src.Outcomes()
	out := make([]node.Outcome, n)
	for i := range n {
		require.Len(t, got[i], 1, "item %d must complete exactly once", i)
		out[i] = got[i][0]
	}
	require.Len(t, got, n)
	return out
}

func repeat(o node.Outcome, n int) []node.Outcome {
	out := make([]node.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func TestTrackedOutcomes(t *testing.T) {
	t.Parallel()
	const n = 40
	type graph func(b *pipeline.Builder, in pipeline.Stream[int])
	sink := func(b *pipeline.Builder, name string, in pipeline.Stream[int]) {
		pipeline.Sink(b, name, in, &pipelinetest.Collector[int]{})
	}
	tests := []struct {
		name  string
		graph graph
		want  func(i int) node.Outcome
	}{
		{"transform and sink", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", pipeline.Transform(b, "double", in, double()))
		}, func(int) node.Outcome { return node.Delivered }},
		{"filter", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", pipeline.Filter(b, "odd", in, func(x int) bool { return x%2 == 1 }))
		}, func(i int) node.Outcome {
			if i%2 == 1 {
				return node.Delivered
			}
			return node.Filtered
		}},
		{"flat map into several, one or none", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", pipeline.FlatMap(b, "fan", in, func(_ context.Context, x int) ([]int, error) {
				return make([]int, x%3), nil
			}))
		}, func(i int) node.Outcome {
			if i%3 == 0 {
				return node.Filtered
			}
			return node.Delivered
		}},
		{"batch and unbatch", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", in, 7, 0)))
		}, func(int) node.Outcome { return node.Delivered }},
		{"batch into a sink", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", in, 3, 0), &pipelinetest.Collector[[]int]{})
		}, func(int) node.Outcome { return node.Delivered }},
		{"broadcast: delivered on one branch, filtered on the other", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "all", in)
			sink(b, "some", pipeline.Filter(b, "none", in, func(int) bool { return false }))
		}, func(int) node.Outcome { return node.Delivered }},
		{"broadcast: filtered on both", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "a", pipeline.Filter(b, "fa", in, func(int) bool { return false }))
			sink(b, "b", pipeline.Filter(b, "fb", in, func(int) bool { return false }))
		}, func(int) node.Outcome { return node.Filtered }},
		{"merge", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			other := pipeline.Source(b, "other", pipelinetest.NewSliceSource(ints(5)...))
			sink(b, "sink", pipeline.Merge(b, "merge", in, other))
		}, func(int) node.Outcome { return node.Delivered }},
		{"parallel ordered", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			sink(b, "sink", pipeline.Transform(b, "double", in, double(), pipeline.Parallel(3)))
		}, func(int) node.Outcome { return node.Delivered }},
		{"parallel unordered sink", func(b *pipeline.Builder, in pipeline.Stream[int]) {
			pipeline.Sink(b, "sink", in, &pipelinetest.Collector[int]{}, pipeline.Parallel(3))
		}, func(int) node.Outcome { return node.Delivered }},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				b := pipeline.New("tracked", m.opts...)
				src := pipelinetest.NewTrackedSource(ints(n)...)
				tt.graph(b, pipeline.Source[int](b, "src", src))
				_, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				want := make([]node.Outcome, n)
				for i := range want {
					want[i] = tt.want(i)
				}
				assert.Equal(t, want, once(t, src, n))
			})
		}
	}
}

func TestTrackedItemsOfAFailedRunFail(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			errBad := errors.New("bad")
			b := pipeline.New("failed", append(m.opts, pipeline.WithResilience(noRetries))...)
			src := pipelinetest.NewTrackedSource(ints(30)...)
			tr := pipeline.Transform[int, int](b, "check", pipeline.Source[int](b, "src", src), pipelinetest.FailAlways(errBad, 10))
			pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
			_, err := build(t, b).Run(t.Context())
			require.ErrorIs(t, err, errBad)
			// The source stops at the failure, so fewer than 30 items may have
			// been emitted; each emitted one has exactly one outcome.
			got := src.Outcomes()
			require.NotEmpty(t, got)
			for i, os := range got {
				require.Len(t, os, 1, "item %d", i)
				switch {
				case i < 10:
					// Delivered if the sink wrote it before the failure
					// stopped the run.
					assert.Contains(t, []node.Outcome{node.Delivered, node.Failed}, os[0], "item %d", i)
				case i == 10:
					assert.Equal(t, node.Rejected, os[0], "the item that failed the run is to blame")
				default:
					assert.Equal(t, node.Failed, os[0], "item %d", i)
				}
			}
		})
	}
}

func TestTrackedDoneThatPanicsFailsTheRun(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad-done")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		return out.EmitTracked(ctx, 1, func(node.Outcome) { panic("ack failed") })
	}))
	pipeline.Sink(b, "sink", src, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "src", ne.Node)
	assert.Contains(t, err.Error(), "EmitTracked done callback panicked")
}

func TestEmitTrackedAfterTheRunStopped(t *testing.T) {
	t.Parallel()
	var outcome node.Outcome
	var emitErr error
	ctx, cancel := context.WithCancel(t.Context())
	b := pipeline.New("late")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(c context.Context, out node.Emitter[int]) error {
		cancel()
		<-c.Done()
		emitErr = out.EmitTracked(c, 1, func(o node.Outcome) { outcome = o })
		return emitErr
	}))
	pipeline.Sink(b, "sink", src, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Error(t, emitErr)
	assert.Equal(t, node.Failed, outcome, "done has run with Failed when EmitTracked returns an error")
}

// ackingSource records its outcomes and fails the test if one arrives
// after Close, the way a broker source would lose an ack.
type ackingSource struct {
	mu       sync.Mutex
	closed   bool
	late     int
	outcomes []node.Outcome
	n        int
}

func (s *ackingSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.n {
		err := out.EmitTracked(ctx, i, func(o node.Outcome) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.closed {
				s.late++
			}
			s.outcomes = append(s.outcomes, o)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *ackingSource) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func TestSourceClosesAfterItsItemsCompleted(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("fail=", fail), func(t *testing.T) {
			t.Parallel()
			src := &ackingSource{n: 200}
			b := pipeline.New("acks", pipeline.WithResilience(noRetries))
			var bad []int
			if fail {
				bad = []int{150}
			}
			tr := pipeline.Transform[int, int](b, "check", pipeline.Source[int](b, "src", src),
				pipelinetest.FailAlways(errors.New("bad"), bad...))
			pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
			_, err := build(t, b).Run(t.Context())
			assert.Equal(t, fail, err != nil)
			src.mu.Lock()
			defer src.mu.Unlock()
			assert.True(t, src.closed)
			assert.Zero(t, src.late, "every outcome reached the source before it closed")
			if !fail {
				assert.Equal(t, repeat(node.Delivered, 200), src.outcomes)
			}
		})
	}
}

// The items of a batch that failed the run are not blamed (they may be
// innocent neighbours of the one that failed it): Failed, unless the batch
// holds one item, which is Rejected.
func TestTrackedBatchThatFailsTheRunIsNotRejected(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 4} {
		for range 20 {
			errBad := errors.New("bad batch")
			clock := clockwork.NewFakeClock()
			b := pipeline.New("batch-fails", pipeline.WithClock(clock), pipeline.WithResilience(noRetries))
			src := pipelinetest.NewTrackedSource(ints(12)...)
			batches := pipeline.Batch(b, "batch", pipeline.Source[int](b, "src", src), size, time.Hour)
			var failing []int
			pipeline.Sink(b, "sink", batches, node.SinkFunc[[]int](func(_ context.Context, xs []int) error {
				if slices.Contains(xs, 4) {
					failing = slices.Clone(xs)
					return errBad
				}
				return nil
			}))
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Hour)
			require.ErrorIs(t, err, errBad)
			for i, os := range src.Outcomes() {
				require.Len(t, os, 1, "item %d", i)
				switch {
				case slices.Contains(failing, i) && len(failing) == 1:
					assert.Equal(t, node.Rejected, os[0], "a batch of one blames its item")
				case slices.Contains(failing, i):
					assert.Equal(t, node.Failed, os[0], "item %d of a failing batch of %d", i, len(failing))
				default:
					assert.Contains(t, []node.Outcome{node.Delivered, node.Failed}, os[0], "item %d", i)
				}
			}
		}
	}
}
