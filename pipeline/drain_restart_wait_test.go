package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A drain does not cut short the restart backoff of a node that is not
// a source: the items in its replay window are the drain's to finish, so
// the node waits out its backoff, restarts, and delivers them; only
// WithDrainTimeout ends that wait, failing what is still in flight. (A
// source's restart wait ends with the drain: it would not be opened
// again, TestDrainWaitsOutSourceRestartBackoff.)
func TestDrainWaitsOutATransformsRestartBackoff(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{0, time.Minute} {
		clock := clockwork.NewFakeClock()
		src := pipelinetest.NewTrackedSource(0, 1, 2)
		opts := []pipeline.Option{pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Fail
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.MaxReplayWindow = 10
			o.NodeRestart.Backoff = resilience.Constant(time.Hour)
		})}
		if timeout > 0 {
			opts = append(opts, pipeline.WithDrainTimeout(timeout))
		}
		b := pipeline.New("drain-restart", opts...)
		var mu sync.Mutex
		calls := map[int]int{}
		var replayed time.Time // when item 0 was called again
		start := clock.Now()
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, x int) error {
			mu.Lock()
			defer mu.Unlock()
			if calls[x]++; x == 0 && calls[x] == 1 {
				return errRestartFlaky // fails the node once
			}
			if x == 0 {
				replayed = clock.Now()
			}
			return nil
		}))
		p := build(t, b)
		run := pipelinetest.Start(t.Context(), p)
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the sink waits its restart backoff")
		if !p.Drain() {
			t.Fatal("no live run to drain")
		}
		if timeout > 0 {
			// One step to the drain's timeout: AdvanceUntilDone's small
			// steps could run the clock past the restart's backoff
			// before the timeout's callback ran.
			clock.Advance(timeout)
			_, err := run.Wait()
			require.ErrorIs(t, err, pipeline.ErrDrainTimeout)
			assert.Equal(t, []node.Outcome{node.Failed}, src.Outcomes()[0], "item 0 was in flight at the drain's timeout")
			mu.Lock()
			assert.Equal(t, 1, calls[0], "item 0 was not called again before the timeout")
			mu.Unlock()
			continue
		}
		_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Minute)
		require.NoError(t, err)
		for i, o := range src.Outcomes() {
			assert.Equal(t, []node.Outcome{node.Delivered}, o, "item %d", i)
		}
		mu.Lock()
		assert.Equal(t, 2, calls[0], "item 0: its failed call and its replay")
		assert.GreaterOrEqual(t, replayed.Sub(start), time.Hour, "the drain cut the sink's restart backoff short")
		mu.Unlock()
	}
}
