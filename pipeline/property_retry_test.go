package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// flaky2 fails items as a seeded plan says: some calls hang until their
// context ends (an attempt timeout), some fail with a Retry-After delay,
// some fail transiently; it records every call's time on the fake clock.
type flaky2 struct {
	clock *clockwork.FakeClock
	plan  map[int][]string // per item, per call: "hang", "after", "fail"; then success

	mu    sync.Mutex
	calls map[int][]time.Time
	after map[int][]time.Duration // the delay each call asked for (0: none)
}

const retryAfterDelay = 3 * time.Second

func (f *flaky2) Process(ctx context.Context, x int) (int, error) {
	f.mu.Lock()
	k := len(f.calls[x])
	f.calls[x] = append(f.calls[x], f.clock.Now())
	var what string
	if k < len(f.plan[x]) {
		what = f.plan[x][k]
	}
	asked := time.Duration(0)
	if what == "after" {
		asked = retryAfterDelay
	}
	f.after[x] = append(f.after[x], asked)
	f.mu.Unlock()
	switch what {
	case "hang":
		<-ctx.Done()
		return 0, ctx.Err()
	case "after":
		return 0, resilience.RetryAfter(errors.New("429"), retryAfterDelay)
	case "fail":
		return 0, errFlaky
	}
	return x, nil
}

// 25 000 items through a node whose calls time out, ask for Retry-After
// delays or fail, under an attempt timeout, an elapsed cap and a shared
// retry budget, on a fake clock: every item ends exactly once, delivered
// or dead-lettered; the budget's ratio holds. With one worker, fake time
// moves only while that worker waits, so the call times are exact: no call
// comes before the delay its error asked for, and no retry starts past the
// elapsed cap. (With several, fake time runs ahead of busy workers.)
func TestPropertyRetryPolicies(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 8} {
		t.Run(map[int]string{1: "one worker", 8: "parallel"}[par], func(t *testing.T) {
			t.Parallel()
			propertyRetryPolicies(t, par)
		})
	}
}

func propertyRetryPolicies(t *testing.T, par int) {
	const (
		n          = 25_000
		ratio      = 0.2
		maxElapsed = 10 * time.Second
		timeout    = 2 * time.Second
	)
	r := rand.New(rand.NewPCG(7, 11))
	clock := clockwork.NewFakeClock()
	f := &flaky2{clock: clock, plan: map[int][]string{}, calls: map[int][]time.Time{}, after: map[int][]time.Duration{}}
	kinds := []string{"hang", "after", "fail"}
	for i := range n {
		if r.IntN(100) < 3 {
			steps := make([]string, 1+r.IntN(5))
			for j := range steps {
				steps[j] = kinds[r.IntN(len(kinds))]
			}
			f.plan[i] = steps
		}
	}
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: ratio, Window: time.Minute, Clock: clock})
	dlq := deadletter.NewMemory(n)
	b := pipeline.New("policies", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 4
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.ItemRetry.AttemptTimeout = timeout
			o.ItemRetry.MaxElapsed = maxElapsed
			o.RetryBudget = budget
			o.OnItemFailure = resilience.DeadLetter
		}))
	src := pipelinetest.NewTrackedSource(ints(n)...)
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), f, pipeline.Parallel(par))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	const step = 100 * time.Millisecond
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), step)
	require.NoError(t, err)

	outcomes := once(t, src, n)
	delivered, dead := 0, 0
	for _, o := range outcomes {
		switch o {
		case node.Delivered:
			delivered++
		case node.DeadLettered:
			dead++
		}
	}
	assert.Equal(t, n, delivered+dead, "every item ends exactly once")
	assert.Equal(t, delivered, sink.Len())
	assert.Equal(t, dead, dlq.Len())

	f.mu.Lock()
	defer f.mu.Unlock()
	retries := 0
	for x, times := range f.calls {
		retries += len(times) - 1
		if par > 1 {
			continue
		}
		for k := 1; k < len(times); k++ {
			if asked := f.after[x][k-1]; asked > 0 {
				assert.GreaterOrEqual(t, times[k].Sub(times[k-1]), asked, "item %d call %d came before its Retry-After", x, k+1)
			}
		}
		// The first failure comes at most one attempt timeout (and one
		// step of the fake clock) after the first call; no retry starts
		// past MaxElapsed from it.
		assert.LessOrEqual(t, times[len(times)-1].Sub(times[0]), maxElapsed+timeout+step, "item %d: %v", x, f.plan[x])
	}
	assert.Positive(t, retries)
	assert.LessOrEqual(t, float64(retries), ratio*n, "the budget's ratio holds")
	assert.Equal(t, int64(retries), nodeOf(t, res, "call").ItemRetries)
	assert.Positive(t, budget.Refused()+int64(dead), "some items gave up")
}
