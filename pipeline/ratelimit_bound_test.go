package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// RateLimit keeps its rate only while its timers fire at most one slot per
// worker late (workers/perSecond): each worker holds one booking, so a
// worker whose timer fires later than that leaves slots unused, and at
// burst 1 the bucket keeps no more than one of them. The fake clock moves
// in steps once every worker waits, so each timer fires up to a step late;
// with steps longer than workers/perSecond, the node falls short of its
// rate (below 95 %), yet every worker still calls at least once a step,
// and no call comes before its slot. TestRateLimitKeepsItsRateWhenTimersFireLate
// shows the steps within the bound.
func TestRateLimitFallsShortWhenTimersAreLaterThanOneSlotPerWorker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rate    float64
		workers int
		step    time.Duration
	}{
		{400, 1, 10 * time.Millisecond},
		{400, 4, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v/s,%d workers,steps of %v", c.rate, c.workers, c.step), func(t *testing.T) {
			t.Parallel()
			const calls = 100
			at := rateLimitedCallTimes(t, c.rate, c.workers, calls, c.step)
			slot := time.Duration(float64(time.Second) / c.rate)
			for i, d := range at[:calls] {
				require.GreaterOrEqual(t, d, time.Duration(i)*slot, "call %d came before its slot", i+1)
			}
			// The first call takes the burst's token at 0; the others
			// took one slot each.
			got := float64(calls-1) / at[calls-1].Seconds()
			t.Logf("%d calls in %v: %.1f/s, %.1f %% of %v/s", calls, at[calls-1], got, 100*got/c.rate, c.rate)
			assert.Less(t, got, 0.95*c.rate, "late by more than a slot per worker: short of the rate")
			assert.GreaterOrEqual(t, got, float64(c.workers)/c.step.Seconds(), "every worker calls at least once a step")
		})
	}
}
