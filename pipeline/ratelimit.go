package pipeline

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
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

// A limiter is the node's token bucket: tokens refill at perSecond per
// second up to burst, and each call takes one. A call books its token
// when it asks (the bucket may go into debt), then waits until the
// instant booked: a timer that fires late delays that call, not the ones
// after it, so the node keeps its rate while its timers fire at most one
// slot per worker late (workers/perSecond; a worker holds one booking at
// a time, and at burst 1 the bucket keeps no more than one slot unused).
// A bucket that took its token only once its timer fired would cap the
// refill at burst then and lose the time the timer was late (at burst 1
// and 400 calls a second, timers a step late on a fake clock moved in
// 1 ms steps left 83 % of the rate, in 10 ms steps 25 %).
//
// It keeps the arithmetic of golang.org/x/time/rate's Limiter.ReserveN
// and Reservation.CancelAt (tokens as a float64 counted at an instant),
// on the pipeline's clock, so that the core module needs no x/time.
type limiter struct {
	clock     clockwork.Clock
	perSecond float64
	burst     float64

	mu sync.Mutex
	// tokens is the bucket's content at last; below zero it is the debt
	// of the bookings made ahead.
	tokens float64
	// last is the instant tokens was counted at; it never goes back, so
	// that no time is refilled twice when bookings read the clock out of
	// order.
	last time.Time
	// lastEvent is the instant of the latest booking.
	lastEvent time.Time
}

// newLimiter returns a full bucket; perSecond must be positive and burst
// at least 1 (Build checks).
func newLimiter(perSecond float64, burst int, clock clockwork.Clock) *limiter {
	return &limiter{clock: clock, perSecond: perSecond, burst: float64(burst), tokens: float64(burst)}
}

// durationFromTokens is how long the bucket takes to refill n tokens; a
// wait too long for a Duration is the longest one.
func (l *limiter) durationFromTokens(n float64) time.Duration {
	d := n / l.perSecond * float64(time.Second)
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// tokensFromDuration is how many tokens the bucket refills in d.
func (l *limiter) tokensFromDuration(d time.Duration) float64 {
	return d.Seconds() * l.perSecond
}

// now reads the clock, never earlier than last. l.mu must be held.
func (l *limiter) now() time.Time {
	now := l.clock.Now()
	if now.Before(l.last) {
		return l.last
	}
	return now
}

// advance returns the bucket's content at now (not before last), refilled
// since last and capped at burst. l.mu must be held.
func (l *limiter) advance(now time.Time) float64 {
	tokens := l.tokens + l.tokensFromDuration(now.Sub(l.last))
	return min(tokens, l.burst)
}

// book takes a token at the clock's instant and returns that instant and
// the one the caller may go at: now when the bucket holds a token, later
// when it is in debt.
func (l *limiter) book() (now, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.now()
	tokens := l.advance(now) - 1
	at = now
	if tokens < 0 {
		at = now.Add(l.durationFromTokens(-tokens))
	}
	l.last, l.tokens, l.lastEvent = now, tokens, at
	return now, at
}

// cancel gives back the token booked for at when at has not come yet,
// less the tokens that bookings made after it took (their slots stay
// theirs): the last booking comes back whole, one followed by a full
// slot of bookings not at all.
func (l *limiter) cancel(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if at.Before(now) {
		return
	}
	restore := 1 - l.tokensFromDuration(l.lastEvent.Sub(at))
	if restore <= 0 {
		return
	}
	l.tokens = min(l.advance(now)+restore, l.burst)
	l.last = now
	if at.Equal(l.lastEvent) {
		// The slot before the cancelled one is the latest booking now,
		// unless it has passed.
		if prev := at.Add(-l.durationFromTokens(1)); !prev.Before(now) {
			l.lastEvent = prev
		}
	}
}

// wait takes a token, waiting on the clock until the instant it booked,
// or returns ctx's cause when ctx ends first; the booking is then given
// back, as far as later bookings allow (see cancel).
func (l *limiter) wait(ctx context.Context) error {
	// A call that will not be made books nothing, as x/time's Wait.
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	now, at := l.book()
	if !at.After(now) {
		return nil
	}
	t := newTimerAt(l.clock, at)
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		t.Stop()
		l.cancel(at)
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
