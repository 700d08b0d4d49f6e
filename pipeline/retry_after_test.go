package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// throttled is an error type of a client library that says how long to
// wait, as an HTTP 429 with Retry-After would.
type throttled struct{ wait time.Duration }

func (e throttled) Error() string             { return fmt.Sprintf("429: retry after %s", e.wait) }
func (e throttled) RetryAfter() time.Duration { return e.wait }

// advanceBy moves the clock by each retry's delay as its event arrives,
// asserting that no call happens before the delay has passed.
func runRetries(t *testing.T, b *pipeline.Builder, clock *clockwork.FakeClock, rec *pipelinetest.Recorder) (pipeline.Result, error) {
	t.Helper()
	return pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), 100*time.Millisecond)
}

// The delay an error asks for replaces the backoff's curve, without
// jitter, capped by MaxDelay: a marked error, an error type with a
// RetryAfter method deep in a chain, and a server that asks for more than
// the cap.
func TestRetryAfterChoosesTheDelay(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := clockwork.NewFakeClock()
		rec := &pipelinetest.Recorder{}
		b := pipeline.New("throttle", pipeline.WithClock(clock), pipeline.WithObserver(rec),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 2
				o.ItemRetry.Backoff = resilience.Exponential(time.Millisecond).WithMaxDelay(10 * time.Second)
			}))
		faults := pipelinetest.NewFaults(map[int][]error{
			1: {resilience.RetryAfter(errors.New("503 busy"), 3*time.Second)},
			2: {fmt.Errorf("call: %w", throttled{7 * time.Second})},
			3: {throttled{time.Hour}},
			4: {resilience.MarkTransient(errors.New("plain"))},
		})
		out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1, 2, 3, 4)), faults)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		res, err := runRetries(t, b, clock, rec)
		require.NoError(t, err)
		assert.Equal(t, int64(4), nodeOf(t, res, "sink").In)
		delays := map[string]time.Duration{}
		for _, e := range pipelinetest.Of[observer.RetryEvent](rec) {
			delays[e.Err.Error()] = e.Delay
		}
		assert.Equal(t, 3*time.Second, delays["503 busy"], "RetryAfter marks the delay")
		assert.Equal(t, 7*time.Second, delays["call: 429: retry after 7s"], "a RetryAfter method in the chain")
		assert.Equal(t, 10*time.Second, delays["429: retry after 1h0m0s"], "capped by MaxDelay")
		assert.LessOrEqual(t, delays["plain"], time.Millisecond, "no mark: the curve")
	}
}

func TestRetryAfterHelpers(t *testing.T) {
	t.Parallel()
	assert.Nil(t, resilience.RetryAfter(nil, time.Second))
	d, ok := resilience.RetryAfterOf(errors.Join(errors.New("x"), resilience.RetryAfter(errors.New("y"), -time.Second)))
	assert.True(t, ok)
	assert.Zero(t, d, "a negative delay counts as 0")
	_, ok = resilience.RetryAfterOf(errors.New("x"))
	assert.False(t, ok)
	assert.True(t, resilience.IsTransient(resilience.RetryAfter(errors.New("x"), time.Second)))
	assert.False(t, resilience.IsTransient(resilience.RetryAfter(resilience.MarkPermanent(errors.New("x")), time.Second)),
		"a permanent mark wins")
}

// MaxElapsed ends layer 1 when the next retry would start past it from
// the item's first failure: the exhaustion says so, and no call is made
// after it.
func TestMaxElapsedEndsRetries(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := clockwork.NewFakeClock()
		rec := &pipelinetest.Recorder{}
		dlq := deadletter.NewMemory(1)
		b := pipeline.New("elapsed", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithDeadLetter(dlq),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 10
				o.ItemRetry.Backoff = resilience.Constant(4 * time.Second)
				o.ItemRetry.MaxElapsed = 10 * time.Second
				o.OnItemFailure = resilience.DeadLetter
			}))
		faults := pipelinetest.FailAlways(errFlaky, 1)
		out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), faults)
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		res, err := runRetries(t, b, clock, rec)
		require.NoError(t, err)
		assert.Equal(t, int64(2), nodeOf(t, res, "call").ItemRetries, "retries at 4s and 8s; one at 12s would pass 10s")
		ex := pipelinetest.Of[observer.RetryExhaustedEvent](rec)
		require.Len(t, ex, 1)
		assert.Equal(t, resilience.LimitElapsed, ex[0].Limit)
		assert.Equal(t, 3, ex[0].Attempts)
		envs := dlq.Envelopes()
		require.Len(t, envs, 1)
		var re *resilience.RetryExhaustedError
		require.ErrorAs(t, envs[0].Err, &re)
		assert.Equal(t, resilience.LimitElapsed, re.Limit)
		assert.Contains(t, envs[0].ErrText, "(elapsed limit)")
		assert.Equal(t, 3, envs[0].Attempts)
	}
}

// MaxElapsed of the node layers: no restart, and no node retry, starts
// past it from the node's first failure; the run's error says which layer
// and which limit ended it.
func TestMaxElapsedOfTheNodeLayers(t *testing.T) {
	t.Parallel()
	t.Run("node restart", func(t *testing.T) {
		t.Parallel()
		clock := clockwork.NewFakeClock()
		b := pipeline.New("elapsed", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.NodeRestart.MaxRestarts = 10
			o.NodeRestart.Backoff = resilience.Constant(4 * time.Second)
			o.NodeRestart.MaxElapsed = 10 * time.Second
		}))
		out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1, 2)), pipelinetest.FailAlways(errFlaky, 2))
		pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
		res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Second)
		var re *resilience.RetryExhaustedError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, resilience.NodeRestart, re.Kind)
		assert.Equal(t, resilience.LimitElapsed, re.Limit)
		assert.Equal(t, int64(2), nodeOf(t, res, "call").NodeRestarts, "at 4s and 8s; one at 12s would pass 10s")
	})
	t.Run("node retry", func(t *testing.T) {
		t.Parallel()
		clock := clockwork.NewFakeClock()
		b := pipeline.New("elapsed", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.NodeRetry.MaxRetries = 10
			o.NodeRetry.Backoff = resilience.Constant(4 * time.Second)
			o.NodeRetry.MaxElapsed = 10 * time.Second
		}))
		src := node.SourceFunc[int](func(context.Context, node.Emitter[int]) error { return errFlaky })
		pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), &pipelinetest.Collector[int]{})
		res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Second)
		var re *resilience.RetryExhaustedError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, resilience.NodeRetry, re.Kind)
		assert.Equal(t, resilience.LimitElapsed, re.Limit)
		assert.Equal(t, int64(2), nodeOf(t, res, "src").NodeRetries)
	})
}
