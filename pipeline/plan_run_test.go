package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// Plan's all time against a real run on the fake clock: one item whose
// calls fail through a breaker that pauses (OpenDuration 10 s, MaxPause
// 30 s), with node restarts. In each cycle the item's first call trips
// (or re-opens) the breaker, the item pauses through probes at 10 s, 20 s
// and 30 s, and the last probe fails for good (a permanent error), which
// restarts the node: a pause of 30 s in each of the three cycles, as the
// docs say (MaxPause counts per restart cycle). Plan's all time must
// cover that, and be what the run took. Under Parallel(2) the same: a
// failure's grace period (DefaultFailGrace, 10 s) is for calls that run
// when the node or the run fails, and none does here, so no restart and
// not the run's end waits for it (before, each cycle's end and the run's
// end left its timer armed, and the driver, which moves the clock while
// anything waits, moved it 10 s each time).
func TestPlanAllTimeCoversPausesInEveryRestartCycle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		restartWait time.Duration
		par         int
		want        time.Duration
	}{
		{0, 1, 90 * time.Second},
		{5 * time.Second, 1, 100 * time.Second},
		{0, 2, 90 * time.Second},
		{5 * time.Second, 2, 100 * time.Second},
	} {
		t.Run(fmt.Sprintf("%v/par=%d", c.restartWait, c.par), func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			var calls atomic.Int64
			fails := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
				if calls.Add(1)%4 == 0 {
					return 0, errors.New("the last probe of a pause fails for good")
				}
				return 0, errFlaky
			})
			b := pipeline.New("plan", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				*o = resilience.Options{}
				o.ItemRetry.MaxRetries = 1
				o.NodeRestart.MaxRestarts = 2
				o.NodeRestart.MaxReplayWindow = 10
				o.NodeRestart.Backoff = resilience.Constant(c.restartWait)
				o.CircuitBreaker = resilience.CircuitBreakerOptions{Enabled: true, ConsecutiveFailures: 1,
					OpenDuration: 10 * time.Second, HalfOpenProbes: 1, ProbeSuccesses: 1,
					WhenOpen: resilience.OpenPause, MaxPause: 30 * time.Second}
			}))
			out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), fails, pipeline.Parallel(c.par))
			pipeline.Sink(b, "store", out, &pipelinetest.Collector[int]{})
			p := build(t, b)
			plan := p.Plan().Nodes[1]
			require.Equal(t, "call", plan.Node)
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
			require.ErrorContains(t, err, "fails for good", "the item fails the node after its last restart")
			assert.Equal(t, int64(12), calls.Load(), "4 calls in each of 3 cycles")
			took := clock.Since(start)
			t.Logf("the item took %v; Plan: all time %v (pause %v a cycle, wait %v)", took, plan.AllTime, plan.Pause, plan.ItemWait)
			require.Equal(t, c.want, took, "the run went as the comment says")
			assert.Equal(t, took, plan.AllTime, "Plan's all time is what the run took")
		})
	}
}
