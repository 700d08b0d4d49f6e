package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A Batch of batches counts items on both sides: its Out, and the sink
// after it, count the inner batches' items, not the inner batches.
func TestBatchOfBatchesCountsItems(t *testing.T) {
	t.Parallel()
	b := pipeline.New("batch-of-batches")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
	inner := pipeline.Batch(b, "inner", src, 3, 0)   // {0,1,2} {3,4,5} {6,7,8} {9}
	outer := pipeline.Batch(b, "outer", inner, 2, 0) // {{0,1,2},{3,4,5}} {{6,7,8},{9}}
	got := &pipelinetest.Collector[[][]int]{}
	pipeline.Sink(b, "sink", outer, got)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	require.Len(t, got.Items(), 2)
	assert.Equal(t, int64(10), nodeOf(t, res, "inner").Out)
	assert.Equal(t, int64(10), nodeOf(t, res, "outer").In)
	assert.Equal(t, int64(10), nodeOf(t, res, "outer").Out, "outer batch: In and Out should both count items")
	assert.Equal(t, int64(10), nodeOf(t, res, "sink").In, "sink after a batch of batches should count the 10 items")
	assert.Equal(t, int64(10), nodeOf(t, res, "sink").Out)
}

// gatedSource emits first, then waits for release, then emits rest.
type gatedSource struct {
	first, rest []int
	release     chan struct{}
}

func (s gatedSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, v := range s.first {
		if err := out.Emit(ctx, v); err != nil {
			return err
		}
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	for _, v := range s.rest {
		if err := out.Emit(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// A transform that hands on shorter (or empty) batches shows no items in
// flight once it holds nothing: a transform of batches has no in-flight
// count.
func TestInFlightOfATrimmingTransform(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := pipeline.New("trim-inflight")
	src := pipeline.Source(b, "src", gatedSource{first: ints(5), rest: ints(5), release: release})
	batches := pipeline.Batch(b, "batch", src, 5, 0)
	trim := pipeline.Map(b, "trim", batches, func(_ context.Context, v []int) ([]int, error) { return v[:2], nil })
	seen := make(chan struct{}, 2)
	pipeline.ForEach(b, "sink", trim, func(context.Context, []int) error { seen <- struct{}{}; return nil })
	p := build(t, b)
	done := make(chan error, 1)
	go func() { _, err := p.Run(t.Context()); done <- err }()
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("first batch never reached the sink")
	}
	var st pipeline.NodeStats
	require.Eventually(t, func() bool {
		var ok bool
		st, ok = p.Stats().Node("trim")
		return ok && st.In == 5 && st.Out == 2
	}, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, st.InFlight, "trim holds nothing, yet Stats says %d items in flight", st.InFlight)
	close(release)
	require.NoError(t, <-done)
}

// After a Batch, Fallbacks counts the items of a rescued batch, as Out
// does.
func TestFallbacksCountItemsThroughBatch(t *testing.T) {
	t.Parallel()
	b := pipeline.New("fallback-batches", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
	}))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...))
	batches := pipeline.Batch(b, "batch", src, 5, 0)
	out := pipeline.Map(b, "work", batches, func(_ context.Context, v []int) ([]int, error) {
		if v[0] == 0 {
			return nil, errors.New("down")
		}
		return v, nil
	}, pipeline.Fallback(func(_ context.Context, v []int, _ error) ([]int, error) { return v, nil }))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[[]int]{})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	w := nodeOf(t, res, "work")
	assert.Equal(t, int64(10), w.Out)
	assert.Equal(t, int64(5), w.Fallbacks, "the rescued batch held 5 items, and they count in Out")
}
