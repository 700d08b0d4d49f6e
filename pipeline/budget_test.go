package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
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
		assert.GreaterOrEqual(t, retries, int64(0.1*2*n)-30, "the budget is used, less the input counts not yet published")
		assert.Equal(t, int64(2*n), res.Node("a").DeadLettered+res.Node("c").DeadLettered)
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

// Over time the budget counts the last Window: with MinPerSecond, a
// trickle retries; a spent budget recovers as the window moves on.
func TestRetryBudgetWindow(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.5, MinPerSecond: 0.2, Window: 10 * time.Second, Clock: clock})
	var in atomic.Int64
	untrack := b.Track(&in)
	// 2 retries from MinPerSecond alone (0.2/s × 10 s).
	assert.True(t, b.Withdraw())
	assert.True(t, b.Withdraw())
	assert.False(t, b.Withdraw())
	in.Add(10) // 10 first attempts: 5 more
	for range 5 {
		assert.True(t, b.Withdraw())
	}
	assert.False(t, b.Withdraw())
	clock.Advance(11 * time.Second) // the window moved past all of it
	assert.True(t, b.Withdraw(), "the minimum again")
	untrack()
	in.Add(1000) // not tracked any more
	clock.Advance(time.Second)
	// At 12 s the 10 first attempts of 0 s are spread over the 12 s since
	// (8 in the window): 0.5 × 8 + 2 = 6 retries, one of them made.
	for range 5 {
		assert.True(t, b.Withdraw())
	}
	assert.False(t, b.Withdraw(), "untracked counts do not count")
	assert.Equal(t, int64(3), b.Refused())

	o := resilience.ForProfile(resilience.ProfileDefault)
	o.RetryBudget = resilience.NewBudget(resilience.BudgetOptions{Ratio: -1, Window: time.Nanosecond})
	err := o.Validate()
	assert.ErrorContains(t, err, "RetryBudget")
	assert.ErrorContains(t, err, "Ratio -1")
	assert.ErrorContains(t, err, "Window 1ns")
}
