package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
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
	assert.Regexp(t, `call\s+transform\s+45\s+3\s+135\s+4.7s\s+2s\s+5m0s\s+2s\s+dead_letter \(2 rules first\)`, s)
	assert.Regexp(t, `store\s+sink\s+101\s+.*\s+fail\n`, s)
	assert.Regexp(t, `read\s+source\s+-\s+3\s+15\s+8s`, s)
}
