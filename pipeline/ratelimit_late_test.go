package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
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
			at := rateLimitedCallTimes(t, c.rate, c.workers, calls, c.step)
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
