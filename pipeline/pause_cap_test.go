package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// R2-plan2: a configuration Validate accepts (59 pause probes + 41 calls =
// 100 <= 101) fails a parallel node with ErrTooManyRepeats in its first
// cycle, with no restart at all.
func TestValidPauseConfigStaysWithinTheRepeatCap(t *testing.T) {
	t.Parallel()
	hits := 0
	const runs = 20
	for range runs {
		clock := clockwork.NewFakeClock()
		var xCalls atomic.Int64
		opts := func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 40
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.NodeRetry.MaxRetries = 0
			o.NodeRestart.MaxRestarts = 0
			o.OnItemFailure = resilience.Skip
			o.CircuitBreaker.Enabled = true
			o.CircuitBreaker.ConsecutiveFailures = 1
			o.CircuitBreaker.OpenDuration = time.Second
			o.CircuitBreaker.HalfOpenProbes = 2
			o.CircuitBreaker.WhenOpen = resilience.OpenPause
			o.CircuitBreaker.MaxPause = 58 * time.Second
		}
		o := resilience.ForProfile(resilience.ProfileDefault)
		opts(&o)
		require.NoError(t, o.Validate())
		b := pipeline.New("cap", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithResilience(opts))
		src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20000)...))
		pipeline.Sink(b, "work", src, node.SinkFunc[int](func(_ context.Context, x int) error {
			if x == 0 {
				xCalls.Add(1)
				return errFlaky
			}
			return nil
		}), pipeline.Parallel(2))
		p := build(t, b)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		r := pipelinetest.Start(ctx, p)
		_, err := pipelinetest.AdvanceUntilDone(ctx, clock, r, time.Second)
		cancel()
		_, _ = r.Wait()
		if err != nil {
			t.Logf("item 0 calls %d: %v", xCalls.Load(), err)
		}
		if err != nil && errorsIs(err, pipeline.ErrTooManyRepeats) {
			hits++
		}
	}
	t.Logf("%d/%d runs failed with ErrTooManyRepeats", hits, runs)
	require.Zero(t, hits, "a validated configuration must not pass the repeat cap in one cycle")
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
