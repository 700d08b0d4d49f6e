package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
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

// slowStart is a source that fails transiently on its first runs, before
// it emits anything, so that layer 3 runs it again.
type slowStart struct {
	failures atomic.Int32
	items    []int
}

func (s *slowStart) Run(ctx context.Context, out node.Emitter[int]) error {
	if s.failures.Add(-1) >= 0 {
		return resilience.MarkTransient(errors.New("connection refused"))
	}
	for _, x := range s.items {
		if err := out.Emit(ctx, x); err != nil {
			return err
		}
	}
	return nil
}

// jitteredRun runs a pipeline whose source is run again twice (layer 3)
// and whose transform retries every item twice (layer 1), all with full
// jitter from a source seeded with seed, on a fake clock; it returns the
// retries the observer saw, in order. One worker retries at a time, so
// the draws come in one order.
func jitteredRun(t *testing.T, seed uint64) []observer.RetryEvent {
	t.Helper()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("jitter", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithRand(rand.New(rand.NewPCG(seed, 0))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(100 * time.Millisecond).WithJitter(resilience.JitterFull)
			o.NodeRetry.MaxRetries = 3
			o.NodeRetry.Backoff = resilience.Exponential(time.Second).WithJitter(resilience.JitterFull)
		}))
	src := &slowStart{items: ints(20)}
	src.failures.Store(2)
	script := map[int][]error{}
	for _, x := range src.items {
		script[x] = []error{errFlaky, errFlaky}
	}
	out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), pipelinetest.NewFaults(script))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "store", out, sink)
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), 50*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 20, sink.Len())
	return pipelinetest.Of[observer.RetryEvent](rec)
}

// WithRand makes the jitter of a whole pipeline repeatable: two runs with
// the same seed choose the same delays, at every layer, and another seed
// chooses others.
func TestWithRandRepeatsAPipelinesJitter(t *testing.T) {
	t.Parallel()
	type retry struct {
		node    string
		kind    resilience.RetryKind
		attempt int
		delay   time.Duration
	}
	retries := func(seed uint64) []retry {
		var out []retry
		for _, e := range jitteredRun(t, seed) {
			out = append(out, retry{e.Node, e.Kind, e.Attempt, e.Delay})
		}
		return out
	}
	first := retries(7)
	require.Len(t, first, 2+20*2, "2 node retries of the source, 2 item retries of each item")
	jittered := 0
	for i, r := range first {
		nominal := 100 * time.Millisecond << (r.attempt - 1)
		if i < 2 {
			assert.Equal(t, "src", r.node)
			assert.Equal(t, resilience.NodeRetry, r.kind)
			nominal = time.Second << (r.attempt - 1)
		} else {
			assert.Equal(t, "call", r.node)
			assert.Equal(t, resilience.ItemRetry, r.kind)
		}
		assert.LessOrEqual(t, r.delay, nominal, "full jitter stays within the curve")
		if r.delay != nominal {
			jittered++
		}
	}
	assert.Greater(t, jittered, len(first)/2, "the delays are jittered")

	assert.Equal(t, first, retries(7), "the same seed, the same delays")
	other := retries(8)
	require.Len(t, other, len(first))
	assert.NotEqual(t, first, other, "another seed, other delays")
}
