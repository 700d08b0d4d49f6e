package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/resilience"
)

// nowMovingClock is a fake clock whose Now, on its call number on,
// returns its reading and then moves the clock by by: the clock moved
// after that reading, before whatever the caller does next.
type nowMovingClock struct {
	*clockwork.FakeClock
	on    int64
	by    time.Duration
	calls atomic.Int64
}

func (c *nowMovingClock) Now() time.Time {
	t := c.FakeClock.Now()
	if c.calls.Add(1) == c.on {
		c.Advance(c.by)
	}
	return t
}

// An attempt's deadline comes from one reading of the clock: the call's
// context ends at the deadline that decides whether its failure is an
// attempt timeout. A call that fails before its context's deadline is
// not one, one that fails at it is, however the clock moved after any
// reading.
func TestAttemptTimeoutDeadlineIsOneReading(t *testing.T) {
	errCall := errors.New("call failed")
	for on := int64(1); on <= 4; on++ {
		for _, at := range []time.Duration{-time.Nanosecond, 0} {
			clock := &nowMovingClock{FakeClock: clockwork.NewFakeClock(), on: on, by: 20 * time.Second}
			var dl time.Time
			f := withAttemptTimeout(func(ctx context.Context, _ int) (int, error) {
				dl, _ = ctx.Deadline()
				clock.Advance(dl.Add(at).Sub(clock.FakeClock.Now()))
				return 0, errCall
			}, time.Minute, clock)
			_, err := f(t.Context(), 1)
			if !errors.Is(err, errCall) {
				t.Fatalf("Now call %d moved the clock: %v, want the call's error", on, err)
			}
			if timedOut := errors.Is(err, resilience.ErrAttemptTimeout); timedOut != (at >= 0) {
				t.Errorf("Now call %d moved the clock; the call failed %v from its context's deadline %v: attempt timeout %v, want %v",
					on, at, dl, timedOut, at >= 0)
			}
		}
	}
}
