package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// RateLimit(100, 1) on a fake clock moved in 1 ms ticks, each once every
// worker waits: 1,000 calls take 10 s of fake time to within a tick (the
// first at once on the full bucket's token, then one per 10 ms slot, the
// last at 9.99 s), whether one worker makes them or four share the
// bucket; no call comes before its slot.
func TestRateLimitPacesCallsAtTheRate(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			const calls, tick, slot = 1000, time.Millisecond, 10 * time.Millisecond
			at := rateLimitedCallTimes(t, 100, workers, calls, tick)
			for i, d := range at[:calls] {
				require.GreaterOrEqual(t, d, time.Duration(i)*slot, "call %d came before its slot", i+1)
			}
			last := at[calls-1]
			assert.GreaterOrEqual(t, last, 9990*time.Millisecond, "1,000 calls at 100/s")
			assert.LessOrEqual(t, last, 9990*time.Millisecond+tick, "1,000 calls at 100/s, within a tick")
		})
	}
}

// rateLimitedCallTimes runs a transform node with Parallel(workers),
// Unordered and RateLimit(rate, 1) on a fake clock that moves in steps
// once every worker waits on it, until the node has made calls calls, and
// returns when each call came (since the start), sorted. The source holds
// more items than calls, so that every worker still waits on the clock
// when the last call counted is made.
func rateLimitedCallTimes(t *testing.T, rate float64, workers, calls int, step time.Duration) []time.Duration {
	t.Helper()
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	var mu sync.Mutex
	var at []time.Duration
	enough := make(chan struct{})
	tr := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, clock.Since(start))
		if len(at) == calls {
			close(enough)
		}
		return x, nil
	})
	b := pipeline.New("rate", pipeline.WithClock(clock))
	out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(calls+10*workers)...)), tr,
		pipeline.Parallel(workers), pipeline.Unordered(), pipeline.RateLimit(rate, 1))
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	ctx, cancel := context.WithCancel(t.Context())
	run := pipelinetest.Start(ctx, build(t, b))
	// A guard on the real clock, so that a worker that never waits fails
	// the test instead of hanging it.
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
drive:
	for {
		select {
		case <-enough:
			break drive
		default:
		}
		if err := clock.BlockUntilContext(wctx, workers); err != nil {
			select {
			case <-enough:
				break drive
			default:
			}
			require.NoError(t, err, "every worker waits on the clock")
		}
		clock.Advance(step)
	}
	cancel()
	_, err := run.Wait()
	require.ErrorIs(t, err, context.Canceled)

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(at), calls)
	got := slices.Clone(at)
	slices.Sort(got)
	return got
}
