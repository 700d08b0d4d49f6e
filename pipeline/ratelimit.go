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
// starts full. Only transforms, sinks, filters and flat maps have a
// function to limit; perSecond must be positive and burst at least 1.
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

// A limiter is a token bucket: tokens refill at rate per second up to
// burst, and each call takes one.
type limiter struct {
	rate  float64
	burst float64
	clock clockwork.Clock

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int, clock clockwork.Clock) *limiter {
	return &limiter{rate: rate, burst: float64(burst), clock: clock, tokens: float64(burst), last: clock.Now()}
}

// wait takes a token, waiting on the clock for one when the bucket is
// empty, or returns ctx's cause when ctx ends first.
func (l *limiter) wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		now := l.clock.Now()
		if now.After(l.last) {
			l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
			l.last = now
		}
		if l.tokens >= 1 {
			l.tokens--
			l.mu.Unlock()
			return nil
		}
		// A rate so slow that the wait does not fit a Duration waits the
		// longest one, not an undefined conversion.
		need := time.Duration(math.MaxInt64)
		if f := (1 - l.tokens) / l.rate * float64(time.Second); f < float64(math.MaxInt64) {
			need = max(time.Duration(f), time.Nanosecond)
		}
		l.mu.Unlock()
		t := l.clock.NewTimer(need)
		select {
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
}

// withRateLimit takes a token of l before every call of f.
func withRateLimit[In, R any](f func(context.Context, In) (R, error), l *limiter) func(context.Context, In) (R, error) {
	return func(ctx context.Context, in In) (R, error) {
		if err := l.wait(ctx); err != nil {
			var zero R
			return zero, err
		}
		return f(ctx, in)
	}
}
