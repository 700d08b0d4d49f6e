package pipeline_test

import (
	"context"
	"fmt"
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

// RateLimit with burst 1 keeps its rate when its timers fire late: the
// fake clock moves only in steps, once every worker waits, so a wait of
// 2.5 ms ends at the next step (3 ms with 1 ms steps, 10 ms with 10 ms
// steps). A bucket that takes its token only when the timer fired drops
// the time the timer was late; one that books each slot ahead does not.
// The rate measured over the first calls is at least 95 % of the setting,
// and no call comes before its slot.
func TestRateLimitKeepsItsRateWhenTimersFireLate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rate    float64
		workers int
		step    time.Duration
	}{
		{400, 4, time.Millisecond},
		{400, 4, 10 * time.Millisecond}, // four slots a step: exactly what four workers can take
		{400, 1, time.Millisecond},
		{100, 4, 3 * time.Millisecond},
		{100, 1, 3 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v/s,%d workers,steps of %v", c.rate, c.workers, c.step), func(t *testing.T) {
			t.Parallel()
			const calls = 400
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
			out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(calls+10*c.workers)...)), tr,
				pipeline.Parallel(c.workers), pipeline.Unordered(), pipeline.RateLimit(c.rate, 1))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			ctx, cancel := context.WithCancel(t.Context())
			run := pipelinetest.Start(ctx, build(t, b))
			// A guard on the real clock, so that a worker that never waits
			// fails the test instead of hanging it.
			wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer wcancel()
		drive:
			for {
				select {
				case <-enough:
					break drive
				default:
				}
				if err := clock.BlockUntilContext(wctx, c.workers); err != nil {
					select {
					case <-enough:
						break drive
					default:
					}
					require.NoError(t, err, "every worker waits on the clock")
				}
				clock.Advance(c.step)
			}
			cancel()
			_, err := run.Wait()
			require.ErrorIs(t, err, context.Canceled)

			mu.Lock()
			defer mu.Unlock()
			require.GreaterOrEqual(t, len(at), calls)
			slot := time.Duration(float64(time.Second) / c.rate)
			for i, d := range at[:calls] {
				require.GreaterOrEqual(t, d, time.Duration(i)*slot, "call %d came before its slot", i+1)
			}
			// The first call takes the burst's token at 0; the others
			// took one slot each.
			got := float64(calls-1) / at[calls-1].Seconds()
			t.Logf("%d calls in %v: %.1f/s, %.1f %% of %v/s", calls, at[calls-1], got, 100*got/c.rate, c.rate)
			assert.GreaterOrEqual(t, got, 0.95*c.rate, "the rate delivered, with timers that fire late")
		})
	}
}
