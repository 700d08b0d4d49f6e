package pipeline_test

import (
	"context"
	"errors"
	"runtime"
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

// A run that fails while a worker of a rate-limited sink waits for its
// token: waiting for a token is no call of user code, so it ends with the
// run at once (it gets no grace period), and the sink is not called after
// the run failed. The clock never moves: Run returns all the same.
func TestFailedRunEndsRateLimitWaitsAndCallsNoMore(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1, 0.01} {
		clock := clockwork.NewFakeClock()
		var (
			mu        sync.Mutex
			calls     int
			afterFail []int
		)
		failed := make(chan struct{})
		sink := node.SinkFunc[int](func(ctx context.Context, v int) error {
			mu.Lock()
			calls++
			first := calls == 1
			select {
			case <-failed:
				afterFail = append(afterFail, v)
			default:
			}
			mu.Unlock()
			if !first {
				return nil
			}
			// The other worker took an item and waits for its token.
			if err := clock.BlockUntilContext(ctx, 1); err != nil {
				return err
			}
			close(failed)
			return resilience.MarkPermanent(errors.New("bad item"))
		})
		b := pipeline.New("grace", pipeline.WithClock(clock))
		pipeline.Sink(b, "store", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(0, 1, 2, 3)), sink,
			pipeline.Parallel(2), pipeline.RateLimit(rate, 1),
			pipeline.NodeResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
		p, err := b.Build()
		require.NoError(t, err)
		res := make(chan error, 1)
		go func() {
			_, err := p.Run(t.Context())
			res <- err
		}()
		var runErr error
		select {
		case runErr = <-res:
		case <-time.After(10 * time.Second):
			// Only a failing Run gets here: let it end before failing.
			for done := false; !done; {
				clock.Advance(time.Second)
				select {
				case runErr = <-res:
					done = true
				default:
					runtime.Gosched()
				}
			}
			t.Errorf("rate %v: Run did not return until the clock moved", rate)
		}
		require.Error(t, runErr)
		mu.Lock()
		assert.Empty(t, afterFail, "rate %v: no call of the sink starts after the run failed", rate)
		mu.Unlock()
	}
}
