package pipelinetest

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/pipeline"
)

// A Running is a pipeline run started by [Start].
type Running struct {
	done chan struct{}
	res  pipeline.Result
	err  error
}

// Start runs p in a new goroutine. Call Wait before the test ends, so that
// the run's goroutines are gone when goleak looks.
func Start(ctx context.Context, p *pipeline.Pipeline) *Running {
	r := &Running{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.res, r.err = p.Run(ctx)
	}()
	return r
}

// Done is closed when the run returned.
func (r *Running) Done() <-chan struct{} { return r.done }

// Wait waits for the run to return and returns what Run returned.
func (r *Running) Wait() (pipeline.Result, error) {
	<-r.done
	return r.res, r.err
}

// Finished reports whether the run returned, without waiting.
func (r *Running) Finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// AdvanceUntilDone moves clock forward by step each time something waits
// on it, until the run returns or ctx is done; it returns what Run
// returned. It suits tests that care about the outcome of a run with waits
// in it, not about the exact waits; for those, watch the observer's events
// and advance by their delays.
//
// It advances as soon as one goroutine waits, even while others are busy:
// with parallel workers, fake time can run ahead of a worker that is
// between two waits (making a call, say), by many steps. A test whose
// outcome depends on how far time moves during such work (an outage
// against MaxPause, a deadline) should leave a wide margin, or drive the
// clock itself with clock.BlockUntilContext(ctx, n) for the n goroutines
// it expects to wait.
func AdvanceUntilDone(ctx context.Context, clock *clockwork.FakeClock, r *Running, step time.Duration) (pipeline.Result, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.done:
			cancel()
		case <-wctx.Done():
		}
	}()
	for {
		if err := clock.BlockUntilContext(wctx, 1); err != nil {
			if r.Finished() {
				return r.Wait()
			}
			return pipeline.Result{}, err
		}
		clock.Advance(step)
	}
}
