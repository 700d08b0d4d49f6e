package pipeline_test

import (
	"errors"
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

var (
	errInvalid = resilience.MarkPermanent(errors.New("invalid"))
	errClient  = resilience.MarkPermanent(errors.New("status 404"))
	errAuth    = resilience.MarkPermanent(errors.New("unauthorized"))
	errOther   = resilience.MarkPermanent(errors.New("other"))
)

func rules() []resilience.FailureRule {
	return []resilience.FailureRule{
		{Match: func(err error) bool { return errors.Is(err, errInvalid) }, Action: resilience.Skip},
		{Match: func(err error) bool { return errors.Is(err, errClient) }, Action: resilience.DeadLetter},
		{Match: func(err error) bool { return errors.Is(err, errAuth) }, Action: resilience.Fail},
	}
}

// The first rule that matches an item's error decides its fate, else
// OnItemFailure; each kind of node, one worker or several.
func TestFailureRulesPickTheAction(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 3} {
		for range 10 {
			dlq := deadletter.NewMemory(10)
			rec := &pipelinetest.Recorder{}
			b := pipeline.New("rules", pipeline.WithDeadLetter(dlq), pipeline.WithObserver(rec),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.DeadLetter
					o.FailureRules = rules()
				}))
			src := pipelinetest.NewTrackedSource(ints(8)...)
			faults := pipelinetest.NewFaults(map[int][]error{1: {errInvalid}, 2: {errClient}, 3: {errOther}})
			out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), faults, pipeline.Parallel(par))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			outcomes := once(t, src, 8)
			assert.Equal(t, node.Skipped, outcomes[1], "a rule skips")
			assert.Equal(t, node.DeadLettered, outcomes[2], "a rule dead-letters")
			assert.Equal(t, node.DeadLettered, outcomes[3], "no rule: OnItemFailure")
			assert.Equal(t, node.Delivered, outcomes[4])
			assert.Equal(t, int64(1), nodeOf(t, res, "call").Skipped)
			assert.Equal(t, int64(2), nodeOf(t, res, "call").DeadLettered)
			assert.Len(t, pipelinetest.Of[observer.DropEvent](rec), 1)
			assert.Len(t, dlq.Envelopes(), 2)
		}
	}
	// A rule that fails the run.
	b := pipeline.New("rules", pipeline.WithDeadLetter(deadletter.NewMemory(10)), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
		o.FailureRules = rules()
	}))
	faults := pipelinetest.NewFaults(map[int][]error{5: {errAuth}})
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(8)...)), faults)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, errAuth)
}

// A rule's Match that panics fails the node with a PanicError naming the
// rule, and a rule without Match, or one that dead-letters without a
// dead-letter sink, is a Build error naming the field.
func TestFailureRulesBadInput(t *testing.T) {
	t.Parallel()
	b := pipeline.New("rules", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.FailureRules = []resilience.FailureRule{{Match: func(error) bool { panic("rule bug") }, Action: resilience.Skip}}
	}))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(3)...)), pipelinetest.FailAlways(errOther, 1))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	var pe *resilience.PanicError
	require.ErrorAs(t, err, &pe)
	assert.ErrorContains(t, err, "failure rule 0 panicked")

	b = pipeline.New("rules", pipeline.WithResilience(func(o *resilience.Options) {
		o.FailureRules = []resilience.FailureRule{{Action: resilience.Skip}, {Match: func(error) bool { return true }, Action: resilience.DeadLetter}}
	}))
	pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), &pipelinetest.Collector[int]{})
	_, err = b.Build()
	assert.ErrorContains(t, err, "FailureRules[0].Match")
	assert.ErrorContains(t, err, "a FailureRules Action = dead_letter: the pipeline has no dead-letter sink")
}

// Rules are the Build's own: changing the slice afterwards changes
// nothing in a built pipeline.
func TestFailureRulesAreCopiedAtBuild(t *testing.T) {
	t.Parallel()
	rs := []resilience.FailureRule{{Match: func(error) bool { return true }, Action: resilience.Skip}}
	b := pipeline.New("rules", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.FailureRules = rs
	}))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(3)...)), pipelinetest.FailAlways(errOther, 1))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p := build(t, b)
	rs[0].Action = resilience.Fail
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int64(1), nodeOf(t, res, "call").Skipped)
}

// An item whose first failure fails the node (by a rule) and whose replay
// after the node restart is dead-lettered carries the whole story: both
// calls, the replayed one labelled node_restart, and the first failure of
// the first attempt.
func TestDeadLetterHistoryAcrossNodeRestarts(t *testing.T) {
	t.Parallel()
	busy := resilience.MarkTransient(errors.New("busy"))
	for _, par := range []int{1, 3} {
		for range 10 {
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("history", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 1
					o.ItemRetry.Backoff = resilience.Constant(time.Second)
					o.NodeRestart.MaxRestarts = 2
					o.NodeRestart.Backoff = resilience.Constant(10 * time.Second)
					o.NodeRestart.MaxReplayWindow = 64
					o.OnItemFailure = resilience.DeadLetter
					o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool { return errors.Is(err, busy) }, Action: resilience.Fail}}
				}))
			src := pipelinetest.NewTrackedSource(ints(8)...)
			faults := pipelinetest.NewFaults(map[int][]error{5: {busy, busy, errOther}})
			out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), faults, pipeline.Parallel(par))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Second)
			require.NoError(t, err)
			assert.Equal(t, int64(1), nodeOf(t, res, "call").Retries(resilience.NodeRestart))
			assert.Equal(t, node.DeadLettered, once(t, src, 8)[5])

			envs := dlq.Envelopes()
			require.Len(t, envs, 1)
			env := envs[0]
			assert.Equal(t, 3, env.Attempts, "every call, across the restart")
			require.Len(t, env.History, 3)
			assert.Equal(t, []resilience.RetryKind{resilience.ItemRetry, resilience.ItemRetry, resilience.NodeRestart},
				[]resilience.RetryKind{env.History[0].Layer, env.History[1].Layer, env.History[2].Layer})
			assert.Equal(t, []int{0, 1, 1}, []int{env.History[0].Retry, env.History[1].Retry, env.History[2].Retry})
			assert.Equal(t, []string{"busy", "busy", "other"}, []string{env.History[0].Err, env.History[1].Err, env.History[2].Err})
			assert.Equal(t, env.History[0].Time, env.FirstFailure, "the first failure is the first attempt's")
			assert.False(t, env.FirstFailure.Before(start))
			assert.GreaterOrEqual(t, env.LastFailure.Sub(env.FirstFailure), 11*time.Second, "a retry and a restart wait apart")
		}
	}
}
