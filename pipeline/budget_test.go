package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/hook"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A dependency that fails every call: with a budget of Ratio 0.1 shared by
// two nodes, it gets at most 1.1 times the calls it would get without
// retries, not 4 times; the items the budget refused are dead-lettered at
// once with ErrBudgetExhausted, and an event says which limit ended them.
func TestRetryBudgetBoundsTheLoad(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, par := range []int{1, 4} {
		clock := clockwork.NewFakeClock()
		budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1, Window: 10 * time.Second, Clock: clock})
		var calls atomic.Int64
		down := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
			calls.Add(1)
			return 0, resilience.MarkTransient(errors.New("down"))
		})
		dlq := deadletter.NewMemory(2 * n)
		rec := &pipelinetest.Recorder{}
		b := pipeline.New("budget", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq), pipeline.WithObserver(rec),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.NoBackoff()
				o.RetryBudget = budget
				o.OnItemFailure = resilience.DeadLetter
			}))
		src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(n)...))
		a := pipeline.Transform[int, int](b, "a", src, down, pipeline.Parallel(par))
		pipeline.Sink(b, "sink", a, &pipelinetest.Collector[int]{})
		src2 := pipeline.Source[int](b, "src2", pipelinetest.NewSliceSource(ints(n)...))
		c := pipeline.Transform[int, int](b, "c", src2, down)
		pipeline.Sink(b, "sink2", c, &pipelinetest.Collector[int]{})
		res, err := build(t, b).Run(t.Context())
		require.NoError(t, err)

		retries := calls.Load() - 2*n
		assert.LessOrEqual(t, retries, int64(0.1*2*n), "at most Ratio × first attempts")
		assert.GreaterOrEqual(t, retries, int64(0.1*2*n)-30, "the budget is used, less the calls not yet counted")
		assert.Equal(t, int64(2*n), nodeOf(t, res, "a").DeadLettered+nodeOf(t, res, "c").DeadLettered)
		byBudget := 0
		for _, env := range dlq.Envelopes() {
			if errors.Is(env.Err, resilience.ErrBudgetExhausted) {
				byBudget++
			}
		}
		assert.Equal(t, int64(byBudget), budget.Refused())
		assert.Greater(t, byBudget, n, "most items were refused a retry")
		limits := map[resilience.Limit]int{}
		for _, e := range pipelinetest.Of[observer.RetryExhaustedEvent](rec) {
			limits[e.Limit]++
		}
		assert.Equal(t, byBudget, limits[resilience.LimitBudget])
	}
}

// Over time the budget counts the last Window: with MinPerSecond a trickle
// retries; a spent budget recovers as the window moves on; a node that
// calls steadily keeps its allowance though no retry asked for leave for a
// whole Window; a burst of calls long ago lends only its share of the
// time since; untracked counters do not count; any clock works, one
// before 1970 too.
func TestRetryBudgetWindow(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(1969, 12, 31, 23, 59, 57, 0, time.UTC))
	b := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.5, MinPerSecond: 0.2, Window: 10 * time.Second, Clock: clock})
	var in atomic.Int64
	untrack := hook.TrackBudget(b, &in)
	withdraw := func(n int) {
		t.Helper()
		for i := range n {
			require.True(t, b.Withdraw(), "retry %d of %d", i+1, n)
		}
		require.False(t, b.Withdraw(), "retry %d", n+1)
	}
	withdraw(2) // MinPerSecond alone: 0.2/s × 10 s
	in.Add(10)  // 10 first attempts: 5 more
	withdraw(5)
	// Ten calls a second for ten seconds, no retry meanwhile: the window
	// holds 110 calls (the 10 at its start too), 55 retries and the
	// minimum's 2; the retries of ten seconds ago are out of it.
	for range 10 {
		clock.Advance(time.Second)
		in.Add(10)
	}
	withdraw(57)
	// A burst, then twenty quiet seconds: the 1 000 calls of the spell
	// count pro rata, half of them in the window, so 250 retries and 2.
	in.Add(1000)
	clock.Advance(20 * time.Second)
	withdraw(252)
	untrack()
	in.Add(1000) // not tracked any more
	clock.Advance(time.Second)
	// The window holds 450 calls of the spell (11 of its 20 s are out),
	// 225 retries and 2, and the 252 retries already made: none more.
	withdraw(0)
	assert.Equal(t, int64(5), b.Refused())

	o := resilience.ForProfile(resilience.ProfileDefault)
	o.RetryBudget = resilience.NewBudget(resilience.BudgetOptions{Ratio: -1, Window: time.Nanosecond})
	err := o.Validate()
	assert.ErrorContains(t, err, "RetryBudget")
	assert.ErrorContains(t, err, "RetryBudget.Ratio = -1")
	assert.ErrorContains(t, err, "RetryBudget.Window = 1ns")
}

// After a Batch a node calls its function once a batch, so the budget
// counts batches as its first attempts, though Stats count the items: 200
// failing batches of 10 items earn 20 retries at Ratio 0.1, not 200.
func TestRetryBudgetCountsBatchCalls(t *testing.T) {
	t.Parallel()
	const batches, size = 200, 10
	clock := clockwork.NewFakeClock()
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1, Window: 10 * time.Second, Clock: clock})
	var calls atomic.Int64
	b := pipeline.New("budget-batch", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.NewMemory(batches)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.RetryBudget = budget
			o.OnItemFailure = resilience.DeadLetter
		}))
	src := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(batches*size)...))
	pipeline.ForEach(b, "sink", pipeline.Batch(b, "batch", src, size, 0), func(context.Context, []int) error {
		calls.Add(1)
		return resilience.MarkTransient(errors.New("down"))
	})
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	retries := calls.Load() - batches
	assert.LessOrEqual(t, retries, int64(0.1*batches), "at most Ratio × batches")
	assert.Equal(t, int64(batches*size), nodeOf(t, res, "sink").DeadLettered)
	assert.Equal(t, int64(batches), nodeOf(t, res, "sink").InBatches)
}
