package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Every item of a failed slice failed at the batch call: its MaxElapsed
// and its dead letter's FirstFailure count from that call, not from when
// its turn to be retried alone comes.
func TestMapBatchMaxElapsedCountsFromTheBatchCallFailure(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	t0 := clock.Now()
	const maxElapsed = 10 * time.Second
	dlq := deadletter.NewMemory(10)
	var mu sync.Mutex
	callsAt := map[int][]time.Duration{} // item -> times of calls holding it, since t0
	down := resilience.MarkTransient(errors.New("down"))
	b := pipeline.New("mapbatch-elapsed", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 100
			o.ItemRetry.Backoff = resilience.Constant(4 * time.Second)
			o.ItemRetry.MaxElapsed = maxElapsed
			o.OnItemFailure = resilience.DeadLetter
		}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0, 1)), 2, 0,
		func(_ context.Context, ins []int) ([]int, []error) {
			mu.Lock()
			for _, v := range ins {
				callsAt[v] = append(callsAt[v], clock.Since(t0))
			}
			mu.Unlock()
			errs := make([]error, len(ins))
			for i := range errs {
				errs[i] = down
			}
			return make([]int, len(ins)), errs
		})
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	// Both items failed first at t0, in the one batch call.
	require.Equal(t, time.Duration(0), callsAt[1][0])
	for _, at := range callsAt[1] {
		assert.LessOrEqual(t, at, maxElapsed, "item 1 was called %s after its first failure (MaxElapsed %s); calls at %v", at, maxElapsed, callsAt[1])
	}
	envs := dlq.Envelopes()
	require.Len(t, envs, 2)
	for _, e := range envs {
		assert.Equal(t, t0, e.FirstFailure, "item %v: FirstFailure is the batch call's failure", e.Item)
	}
}
