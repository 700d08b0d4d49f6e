package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// pausedRetry runs one item through a node whose first call fails and
// trips its breaker (OpenPause, OpenDuration 10 s), with MaxElapsed
// maxElapsed, and moves the clock on by advance once the retry waits for
// the breaker. It returns the calls made, the items delivered, the
// exhaustion events seen and the node's ItemRetries.
func pausedRetry(t *testing.T, maxElapsed, advance time.Duration) (calls int32, delivered int, exhausted []observer.RetryExhaustedEvent, retries int64) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	var n atomic.Int32
	dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		if n.Add(1) == 1 {
			return 0, errFlaky
		}
		return x, nil
	})
	b := pipeline.New("elapsed-pause", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.ItemRetry.MaxElapsed = maxElapsed
			o.NodeRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 1
			o.CircuitBreaker.OpenDuration = 10 * time.Second
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = time.Minute
		}))
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), dep)
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	_, err := pipelinetest.WaitFor[observer.CircuitEvent](t.Context(), rec, 1)
	require.NoError(t, err)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(advance)
	res, err := run.Wait()
	require.NoError(t, err)
	return n.Load(), len(sink.Items()), pipelinetest.Of[observer.RetryExhaustedEvent](rec), nodeOf(t, res, "call").ItemRetries
}

// ItemRetry.MaxElapsed: no retry starts once it has passed since the
// item's first failure, a retry that waited for a paused breaker
// (OpenPause) included. The retry was made when the breaker half-opened,
// 10 s after a first failure whose MaxElapsed was 1 s (a review's
// finding).
func TestMaxElapsedHoldsThroughAnOpenPause(t *testing.T) {
	t.Parallel()
	for _, advance := range []time.Duration{time.Second, 10 * time.Second} {
		calls, delivered, exhausted, retries := pausedRetry(t, time.Second, advance)
		assert.Equal(t, int32(1), calls, "advance %v: no retry starts past MaxElapsed", advance)
		// It was counted when decided, although never made.
		assert.Zero(t, retries, "advance %v: the retry given up was not made", advance)
		assert.Equal(t, 0, delivered, "advance %v: the item was given up and skipped", advance)
		require.Len(t, exhausted, 1, "advance %v", advance)
		assert.Equal(t, resilience.LimitElapsed, exhausted[0].Limit, "advance %v", advance)
		assert.ErrorIs(t, exhausted[0].Err, errFlaky, "advance %v: the last call's error", advance)
	}
}

// A breaker that half-opens within MaxElapsed lets the paused retry
// through.
func TestOpenPauseWithinMaxElapsedRetries(t *testing.T) {
	t.Parallel()
	calls, delivered, exhausted, retries := pausedRetry(t, 20*time.Second, 10*time.Second)
	assert.Equal(t, int32(2), calls)
	assert.Equal(t, int64(1), retries)
	assert.Equal(t, 1, delivered)
	assert.Empty(t, exhausted)
}

// An item whose first call is a half-open breaker's probe, and fails, has
// its first failure then: its wait for the next probe ends by MaxElapsed
// from it. The failed probe took the path that waits for the next probe
// without starting MaxElapsed's count, so the item was called again 10 s
// after its first failure with MaxElapsed 1 s (second review).
func TestMaxElapsedCountsFromAFailedFirstProbe(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	var n, item2 atomic.Int32
	called2 := make(chan struct{}, 4)
	dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		c := n.Add(1)
		if x == 2 {
			item2.Add(1)
			called2 <- struct{}{}
		}
		if c <= 2 {
			return 0, errFlaky
		}
		return x, nil
	})
	b := pipeline.New("elapsed-probe", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.ItemRetry.MaxElapsed = time.Second
			o.NodeRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 1
			o.CircuitBreaker.OpenDuration = 10 * time.Second
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = time.Minute
		}))
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), dep)
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	ctx := t.Context()
	// 0 s: item 1 fails and opens the breaker; its retry waits until 1 s,
	// its MaxElapsed, and is given up.
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Second)
	_, err := pipelinetest.WaitFor[observer.RetryExhaustedEvent](ctx, rec, 1)
	require.NoError(t, err)
	// Item 2's first call waits for the breaker to half-open, at 10 s: it
	// is the probe, and fails, opening the breaker until 20 s.
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(9 * time.Second)
	select {
	case <-called2:
	case <-ctx.Done():
		t.Fatal("item 2 was never called")
	}
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(10 * time.Second) // 20 s: the breaker half-opens
	_, err = run.Wait()
	require.NoError(t, err)
	assert.Equal(t, int32(1), item2.Load(), "no call of item 2 past MaxElapsed from its failed probe")
	assert.Empty(t, sink.Items())
	exhausted := pipelinetest.Of[observer.RetryExhaustedEvent](rec)
	require.Len(t, exhausted, 2)
	assert.Equal(t, resilience.LimitElapsed, exhausted[1].Limit)
}
