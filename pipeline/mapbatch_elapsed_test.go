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
		if assert.NotEmpty(t, e.History) {
			assert.Equal(t, t0, e.History[0].Time, "item %v: its first attempt is the batch call", e.Item)
		}
	}
}

// The first wait of each failed item of a slice starts at the batch call's
// failure: an item whose turn comes after another item's retries waits
// only what is left of its wait, and a wait handed off to the broker says
// Since the batch call, with the delay left.
func TestMapBatchFirstWaitCountsFromTheBatchCallFailure(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	t0 := clock.Now()
	b := pipeline.New("mapbatch-first-wait", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	// Items 4 and 5 fill the slice that item 3's redelivery joins.
	br := newSimBroker(time.Minute, 1, 2, 3, 4, 5)
	var mu sync.Mutex
	callsAt := map[int][]time.Duration{} // item -> times of calls holding it, since t0
	out := pipeline.MapBatch(b, "bulk", pipeline.Source[delivery](b, "src", br), 3, 0,
		func(_ context.Context, ins []delivery) ([]delivery, []error) {
			mu.Lock()
			defer mu.Unlock()
			errs := make([]error, len(ins))
			for i, d := range ins {
				callsAt[d.id] = append(callsAt[d.id], clock.Since(t0))
				if len(callsAt[d.id]) == 1 {
					switch d.id {
					case 1:
						errs[i] = wait(4 * time.Second) // waits in the node
					case 2:
						errs[i] = wait(3 * time.Second) // its turn comes at 4s
					case 3:
						errs[i] = wait(time.Hour) // handed to the broker at 4s
					}
				}
			}
			return ins, errs
		})
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []time.Duration{0, 4 * time.Second}, callsAt[1])
	assert.Equal(t, []time.Duration{0, 4 * time.Second}, callsAt[2], "item 2's 3 s wait had passed when its turn came")
	br.mu.Lock()
	defer br.mu.Unlock()
	require.Len(t, br.handOffs, 1, "item 3's wait was handed off")
	h := br.handOffs[0]
	assert.Equal(t, t0, h.Since, "the retries started at the batch call's failure")
	assert.Equal(t, t0, h.Envelope.FirstFailure)
	assert.Equal(t, time.Hour-4*time.Second, h.Delay, "the wait left after the 4 s since the batch call")
	assert.Equal(t, 1, h.Retry)
}
