package resilience_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

// runningClock stands for a clock that runs by itself, as the real clock
// does behind a wrapper (instrumentation, a clock that logs): every reading
// is a microsecond later than the last. Its timers are a fake clock's, so
// they fire only when the test advances it. It counts the timers armed.
type runningClock struct {
	*clockwork.FakeClock
	readings atomic.Int64
	timers   atomic.Int64
}

func (c *runningClock) Now() time.Time {
	return c.FakeClock.Now().Add(time.Duration(c.readings.Add(1)) * time.Microsecond)
}

func (c *runningClock) NewTimer(d time.Duration) clockwork.Timer {
	c.timers.Add(1)
	return c.FakeClock.NewTimer(d)
}

// openBreaker returns a breaker on clock that is open for an hour.
func openBreaker(t *testing.T, clock clockwork.Clock) *resilience.Breaker {
	t.Helper()
	b := resilience.NewBreaker("n", resilience.CircuitBreakerOptions{Enabled: true, ConsecutiveFailures: 1,
		OpenDuration: time.Hour, HalfOpenProbes: 1, ProbeSuccesses: 1}, clock, nil)
	p, err := b.Allow()
	require.NoError(t, err)
	b.Record(p, resilience.CallFailure)
	require.Equal(t, resilience.CircuitOpen, b.State())
	return b
}

// On a clock that runs by itself, Wait arms one timer and waits on it until
// its deadline: it does not arm again for every later reading.
func TestBreakerWaitOnARunningClockArmsOneTimer(t *testing.T) {
	t.Parallel()
	clock := &runningClock{FakeClock: clockwork.NewFakeClock()}
	b := openBreaker(t, clock)
	res := make(chan error, 1)
	go func() {
		_, err := b.Wait(t.Context(), clock.Now().Add(10*time.Millisecond))
		res <- err
	}()
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Minute)
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, <-res, &coe, "past its deadline Wait returns the refusal")
	assert.Equal(t, int64(1), clock.timers.Load(), "timers armed")
}

// On a clock that runs by itself, Wait returns the context's cause when
// the context ends, whether it ended before the call or during the wait,
// well before Wait's deadline.
func TestBreakerWaitOnARunningClockReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	cause := context.Canceled
	t.Run("before", func(t *testing.T) {
		clock := &runningClock{FakeClock: clockwork.NewFakeClock()}
		b := openBreaker(t, clock)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.Wait(ctx, clock.Now().Add(10*time.Millisecond))
		require.ErrorIs(t, err, cause)
		assert.LessOrEqual(t, clock.timers.Load(), int64(1), "timers armed")
	})
	t.Run("during", func(t *testing.T) {
		clock := &runningClock{FakeClock: clockwork.NewFakeClock()}
		b := openBreaker(t, clock)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := b.Wait(ctx, clock.Now().Add(10*time.Millisecond))
			res <- err
		}()
		// Bounded only so that a Wait that never waits fails the test
		// rather than hanging it; a good one is waiting at once.
		bctx, bcancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer bcancel()
		require.NoError(t, clock.BlockUntilContext(bctx, 1), "Wait waits on a timer")
		cancel()
		require.ErrorIs(t, <-res, cause)
		assert.Equal(t, int64(1), clock.timers.Load(), "timers armed")
	})
}

// The real clock behind a wrapper: Wait waits until its deadline on a few
// timers and returns the refusal, or returns at once with the context's
// cause when the context has ended.
func TestBreakerWaitOnAWrappedRealClock(t *testing.T) {
	t.Parallel()
	clock := &timerCountingClock{Clock: clockwork.NewRealClock()}
	b := openBreaker(t, clock)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.Wait(ctx, time.Now().Add(2*time.Second))
	require.ErrorIs(t, err, context.Canceled)

	_, err = b.Wait(t.Context(), time.Now().Add(20*time.Millisecond))
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.Less(t, clock.timers.Load(), int64(10), "timers armed")
}

type timerCountingClock struct {
	clockwork.Clock
	timers atomic.Int64
}

func (c *timerCountingClock) NewTimer(d time.Duration) clockwork.Timer {
	c.timers.Add(1)
	return c.Clock.NewTimer(d)
}
