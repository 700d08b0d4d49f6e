package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// RateLimit(10, 2): a burst of 2 calls at once, then one call per 100 ms
// of the pipeline's clock, shared by the node's workers, retries counted;
// never a call before its token.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 4} {
		for range 5 {
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			var mu sync.Mutex
			var at []time.Duration
			failed := false
			tr := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, clock.Since(start))
				if x == 3 && !failed {
					failed = true
					return 0, errFlaky // one retry, which takes a token too
				}
				return x, nil
			})
			b := pipeline.New("rate", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 1
				o.ItemRetry.Backoff = resilience.NoBackoff()
			}))
			out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(10)...)), tr,
				pipeline.Parallel(par), pipeline.RateLimit(10, 2))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, sink)
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), 10*time.Millisecond)
			require.NoError(t, err)
			assert.Len(t, sink.Items(), 10)
			mu.Lock()
			slices.Sort(at)
			require.GreaterOrEqual(t, len(at), 11, "10 items and a retry")
			for i, d := range at {
				floor := time.Duration(max(0, i-1)) * 100 * time.Millisecond
				assert.GreaterOrEqual(t, d, floor, "call %d came before its token", i+1)
			}
			mu.Unlock()
		}
	}
}

func TestRateLimitBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opt  pipeline.NodeOption
		want string
	}{
		{pipeline.RateLimit(0, 1), "RateLimit(0, 1): perSecond must be a positive number"},
		{pipeline.RateLimit(10, 0), "RateLimit(10, 0): burst must be at least 1"},
	} {
		b := pipeline.New("rate")
		out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), double(), c.opt)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		_, err := b.Build()
		assert.ErrorContains(t, err, `node "call": `+c.want)
	}
	b := pipeline.New("rate")
	src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1), pipeline.RateLimit(1, 1))
	pipeline.Sink(b, "sink", src, &pipelinetest.Collector[int]{})
	_, err := b.Build()
	assert.ErrorContains(t, err, `node "src": RateLimit: a source calls no function to limit`)
}

// Without WithClock, RateLimit uses the real clock: Build must not need
// the clock before it has its default. Five items fit the burst: no wait.
func TestRateLimitOnTheRealClock(t *testing.T) {
	t.Parallel()
	b := pipeline.New("rate")
	out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(5)...)), double(),
		pipeline.RateLimit(1, 5))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Len(t, sink.Items(), 5)
}

// A rate so slow that a token takes longer than a Duration holds does not
// spin on 1 ns timers: the second call waits, and the run stops cleanly.
func TestRateLimitTinyRate(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1e-10, 5e-324} {
		clock := clockwork.NewFakeClock()
		var calls atomic.Int64
		b := pipeline.New("rate", pipeline.WithClock(clock))
		out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1, 2)),
			node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) { calls.Add(1); return x, nil }),
			pipeline.RateLimit(rate, 1))
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, build(t, b))
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the second call waits on one timer")
		clock.Advance(100 * 365 * 24 * time.Hour)
		assert.Equal(t, int64(1), calls.Load(), "rate %g: no token in a century", rate)
		cancel()
		_, err := run.Wait()
		assert.ErrorIs(t, err, context.Canceled)
	}
}
