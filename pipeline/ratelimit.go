package pipeline

import (
	"context"
	"sync"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"
)

// RateLimit makes the node call its function at most perSecond times a
// second on average, in bursts of at most burst calls, counting every call
// (retries too: a metered API counts them), across the node's parallel
// workers and across runs of the pipeline. A call that has to wait holds
// its worker, which is backpressure; the wait ends when the run stops. The
// rate is kept on the pipeline's clock (WithClock), as a token bucket that
// starts full; each call books its token when it asks and waits until
// then, so a timer that fires late delays that call, not the ones booked
// after it. Each worker holds one booking at a time, so the node keeps its
// rate while its timers fire at most workers/perSecond late (one slot per
// worker); timers later than that leave slots unused, though each worker
// still calls at least once each time its timer fires. Only transforms,
// sinks, filters and flat maps have a function to limit; perSecond must be
// positive and burst at least 1.
//
// A call waits for its token after the node's breaker granted it a permit:
// under a half-open breaker a probe's slot stays taken while it waits.
//
// Items a rate-limited worker has finished may wait in its output batch
// while it waits for the next call (up to a batch of the pipeline's
// hand-over size); WithHandOverBatch(1) hands each over at once.
func RateLimit(perSecond float64, burst int) NodeOption {
	return func(c *nodeConfig) { c.rate, c.burst, c.limited = perSecond, burst, true }
}

// A limiter is the node's token bucket: tokens refill at the rate per
// second up to burst, and each call takes one. It is golang.org/x/time/rate's
// Limiter read at the pipeline's clock's instants. A call books its token
// when it asks (the bucket may go into debt), then waits until the instant
// booked: a timer that fires late delays that call, not the ones after
// it, so the node keeps its rate while its timers fire at most one slot
// per worker late (workers/perSecond; a worker holds one booking at a
// time, and at burst 1 the bucket keeps no more than one slot unused). A
// bucket
// that took its token only once its timer fired would cap the refill at
// burst then and lose the time the timer was late (at burst 1 and 400
// calls a second, timers a step late on a fake clock moved in 1 ms steps
// left 83 % of the rate, in 10 ms steps 25 %).
type limiter struct {
	lim   *rate.Limiter
	clock clockwork.Clock
	// mu makes the instants given to lim rise in the order of the
	// bookings: rate.Limiter takes an earlier instant than its last one as
	// its new last, and would then refill the time between them twice.
	mu sync.Mutex
}

func newLimiter(perSecond float64, burst int, clock clockwork.Clock) *limiter {
	return &limiter{lim: rate.NewLimiter(rate.Limit(perSecond), burst), clock: clock}
}

// wait takes a token, waiting on the clock until the instant it booked,
// or returns ctx's cause when ctx ends first; the booking is then given
// back, as far as later bookings allow.
func (l *limiter) wait(ctx context.Context) error {
	// Burst is at least 1 (Build checks), so a booking of 1 is always
	// made; a rate so slow that the wait does not fit a Duration books
	// the longest one.
	l.mu.Lock()
	now := l.clock.Now()
	r := l.lim.ReserveN(now, 1)
	l.mu.Unlock()
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	t := newTimerAt(l.clock, now.Add(d))
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		t.Stop()
		l.mu.Lock()
		r.CancelAt(l.clock.Now())
		l.mu.Unlock()
		return context.Cause(ctx)
	}
}

// withRateLimit takes a token of l before every call of f. The token is
// waited for under the node's stop signal, not under the call's context
// (see callsWithStop): waiting is no call of user code, so it gets no
// grace period when the run fails, and f is not called once the node
// stopped.
func withRateLimit[In, R any](f func(context.Context, In) (R, error), l *limiter) func(context.Context, In) (R, error) {
	return func(ctx context.Context, in In) (R, error) {
		stop := stopOf(ctx)
		if err := l.wait(stop); err != nil {
			var zero R
			return zero, err
		}
		if stop.Err() != nil {
			var zero R
			return zero, context.Cause(stop)
		}
		return f(ctx, in)
	}
}

// stopKey is the key of the stop signal that callsWithStop stores in a
// call's context.
type stopKey struct{}

// callsWithStop returns calls, the context for a call of the node's
// function under stop, its stop signal (see enterCall): a failure of the
// run cancels calls only a grace period later. When the node waits before
// the call within that function (RateLimit), stop rides along, so that the
// wait ends as soon as the node stops.
func callsWithStop(nr *nodeRun, stop, calls context.Context) context.Context {
	if nr.spec.limiter == nil {
		return calls
	}
	return context.WithValue(calls, stopKey{}, stop)
}

// stopOf returns the stop signal callsWithStop stored in ctx, or ctx.
func stopOf(ctx context.Context) context.Context {
	if stop, ok := ctx.Value(stopKey{}).(context.Context); ok {
		return stop
	}
	return ctx
}
