package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// R2-plan: under OpenPause on a parallel node, an item's pause is reset
// whenever it gets a non-probe permit (another worker's probe closed the
// breaker), so one item can pause once per retry: its calls in one cycle
// are not bounded by MaxRetries + 1 + PauseProbes as Plan and Validate say.
func TestPlanCountsEveryPauseProbeOnAParallelNode(t *testing.T) {
	t.Parallel()
	worst, plan := 0, 0
	var lastErr error
	for it := range 30 {
		clock := clockwork.NewFakeClock()
		var xCalls atomic.Int64
		b := pipeline.New("plan", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.NodeRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 1
			o.CircuitBreaker.OpenDuration = time.Second
			o.CircuitBreaker.HalfOpenProbes = 2
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = 10 * time.Second
		}))
		src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(3000)...))
		pipeline.Sink(b, "work", src, node.SinkFunc[int](func(_ context.Context, x int) error {
			if x == 0 {
				xCalls.Add(1)
				return errFlaky
			}
			return nil
		}), pipeline.Parallel(2))
		p := build(t, b)
		for _, np := range p.Plan().Nodes {
			if np.Node == "work" {
				plan = np.ItemCalls
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		r := pipelinetest.Start(ctx, p)
		_, err := pipelinetest.AdvanceUntilDone(ctx, clock, r, time.Second)
		cancel()
		_, _ = r.Wait()
		if err != nil && !errors.Is(err, resilience.ErrCircuitOpen) {
			lastErr = err
		}
		worst = max(worst, int(xCalls.Load()))
		_ = it
	}
	t.Logf("Plan ItemCalls = %d; most calls of item 0 seen = %d; other error: %v", plan, worst, lastErr)
	if worst > plan {
		t.Errorf("item 0 was called %d times, Plan says at most %d", worst, plan)
	}
}
