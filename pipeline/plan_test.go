package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func TestPlanMultipliesTheLayers(t *testing.T) {
	t.Parallel()
	b := pipeline.New("plan", pipeline.WithDeadLetter(deadletter.NewMemory(1)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(100 * time.Millisecond).WithMaxDelay(250 * time.Millisecond)
			o.NodeRetry.MaxRetries = 2
			o.NodeRetry.Backoff = resilience.Constant(time.Second)
		}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1), pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 4
		o.NodeRestart.Backoff = resilience.Constant(2 * time.Second)
	}))
	tr := pipeline.Transform(b, "call", src, double(), pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 2
		o.NodeRestart.Backoff = resilience.Linear(time.Second).WithJitter(resilience.JitterNone)
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.AttemptTimeout = 2 * time.Second
		o.FailureRules = []resilience.FailureRule{
			{Match: func(error) bool { return false }, Action: resilience.Skip},
			{Match: func(error) bool { return false }, Action: resilience.Fail},
		}
		o.CircuitBreaker.Enabled = true
		o.CircuitBreaker.WhenOpen = resilience.OpenPause
	}))
	pipeline.Sink(b, "store", tr, &pipelinetest.Collector[int]{}, pipeline.NodeResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 60
		o.ItemRetry.Backoff = resilience.Constant(time.Second)
		o.NodeRestart.MaxRestarts = 5
	}))
	plan := build(t, b).Plan()
	require.Len(t, plan.Nodes, 3)

	read := plan.Nodes[0]
	assert.Equal(t, 0, read.ItemCalls)
	assert.Equal(t, 3, read.Starts)
	assert.Equal(t, 15, read.Multiplied, "5 runs per start × 3 starts")
	assert.Equal(t, 8*time.Second, read.ItemWait, "4 restarts of 2s")
	assert.Equal(t, 2*time.Second, read.StartWait)

	call := plan.Nodes[1]
	// A pause of 5 min probes every 30 s: 11 probes, which spend no retry.
	assert.Equal(t, 45, call.ItemCalls, "(4 calls + 11 probes) per cycle × 3 cycles")
	assert.Equal(t, 135, call.Multiplied)
	// Each cycle waits 100+200+250 ms; restarts wait 1s then 2s.
	assert.Equal(t, 3*550*time.Millisecond+3*time.Second, call.ItemWait)
	assert.Equal(t, 5*time.Minute, call.Pause)
	assert.Equal(t, 3*5*time.Minute, call.ItemPause, "a pause in each of 3 cycles")
	assert.Equal(t, call.ItemWait+call.ItemPause+45*2*time.Second, call.AllTime)
	assert.Equal(t, resilience.DeadLetter, call.OnItemFailure)
	assert.Equal(t, 2, call.FailureRules)
	assert.Equal(t, 2*time.Second, call.AttemptTimeout)

	store := plan.Nodes[2]
	assert.Equal(t, resilience.MaxRepeats+1, store.ItemCalls, "capped: the engine fails the node past 100 repeats")
	assert.Equal(t, 61*6*3, store.Multiplied, "the uncapped product")
	// Cycle 1: 61 calls, 60 waits; restart 1 waits the default exponential
	// 1s (nominal); cycle 2: the remaining 40 calls, 39 waits.
	assert.Equal(t, 60*time.Second+time.Second+39*time.Second, store.ItemWait)

	s := plan.String()
	assert.Contains(t, s, `resilience plan of pipeline "plan" (worst cases)`)
	assert.Regexp(t, `call\s+transform\s+45\s+3\s+135\s+4.7s\s+2s\s+15m0s\s+2s\s+1\s+45\s+16m34.7s\s+dead_letter \(2 rules first\)`, s)
	assert.Regexp(t, `store\s+sink\s+101\s+.*\s+fail\n`, s)
	assert.Regexp(t, `read\s+source\s+-\s+3\s+15\s+8s`, s)
}

// redelivering is a source with a broker layer: 3 redeliveries, 1 min apart.
type redelivering struct{ *pipelinetest.SliceSource[int] }

func (redelivering) Redeliveries() (int, time.Duration) { return 3, time.Minute }

// The broker layer of a source upstream multiplies the calls and adds its
// waits; MaxElapsed caps a cycle's waits; a budget is marked.
func TestPlanCountsTheBrokerLayer(t *testing.T) {
	t.Parallel()
	b := pipeline.New("plan", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 4
		o.ItemRetry.Backoff = resilience.Constant(10 * time.Second)
		o.ItemRetry.MaxElapsed = 25 * time.Second
		o.ItemRetry.AttemptTimeout = time.Second
		o.NodeRetry.MaxRetries = 0
	}))
	src := pipeline.Source[int](b, "consume", redelivering{pipelinetest.NewSliceSource(1)})
	other := pipeline.Source[int](b, "local", pipelinetest.NewSliceSource(2))
	h := pipeline.Transform(b, "handle", src, double(), pipeline.NodeResilience(func(o *resilience.Options) {
		o.RetryBudget = resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1})
	}), pipeline.RateLimit(50, 5), pipeline.Fallback(func(_ context.Context, x int, _ error) (int, error) { return x, nil }))
	pipeline.Sink(b, "store", pipeline.Merge(b, "merge", h, other), &pipelinetest.Collector[int]{})
	plan := build(t, b).Plan()
	byName := map[string]pipeline.NodePlan{}
	for _, n := range plan.Nodes {
		byName[n.Node] = n
	}
	handle := byName["handle"]
	assert.Equal(t, 5, handle.ItemCalls)
	assert.Equal(t, 25*time.Second, handle.ItemWait, "4 waits of 10s, capped by MaxElapsed")
	assert.Equal(t, 4, handle.Deliveries)
	assert.Equal(t, 3*time.Minute, handle.BrokerWait)
	assert.Equal(t, 20, handle.AllCalls)
	assert.Equal(t, 4*(25*time.Second+5*time.Second)+3*time.Minute, handle.AllTime)
	assert.True(t, handle.Budget)
	assert.Equal(t, 4, byName["store"].Deliveries, "downstream of a merge with the redelivering source")
	assert.Equal(t, 1, byName["local"].Deliveries)
	assert.Equal(t, 50.0, handle.RateLimit)
	assert.True(t, handle.Fallback)
	assert.Regexp(t, `handle\s+transform\s+5\s+1\s+5\s+25s\s+0s\s+-\s+1s, 50/s\s+4\s+20 \(budget\)\s+5m0s\s+fallback, then fail`, plan.String())
}
