package clocktimer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/clocktimer"
	"github.com/sluicehq/sluice/internal/require"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testClock is a fake clock that counts the timers armed on it. When
// running, every reading is a microsecond later than the last, as on the
// real clock behind a wrapper; when moveOnArm is set, it moves by that
// much as a timer is armed, once, as when another goroutine advances it.
type testClock struct {
	*clockwork.FakeClock
	running   bool
	readings  atomic.Int64
	moveOnArm atomic.Int64
	timers    atomic.Int64
}

func (c *testClock) Now() time.Time {
	if !c.running {
		return c.FakeClock.Now()
	}
	return c.FakeClock.Now().Add(time.Duration(c.readings.Add(1)) * time.Microsecond)
}

func (c *testClock) NewTimer(d time.Duration) clockwork.Timer {
	c.timers.Add(1)
	if by := c.moveOnArm.Swap(0); by > 0 {
		c.Advance(time.Duration(by))
	}
	return c.FakeClock.NewTimer(d)
}

func fired(t clockwork.Timer) bool {
	select {
	case <-t.Chan():
		return true
	default:
		return false
	}
}

// A clock moved while the timer was armed: At arms again, so that the
// timer fires at the instant asked for, not late by the move.
func TestAtFiresOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	clock := &testClock{FakeClock: clockwork.NewFakeClock()}
	at := clock.Now().Add(10 * time.Second)
	clock.moveOnArm.Store(int64(3 * time.Second))
	timer := clocktimer.At(clock, at)
	defer timer.Stop()
	assert.Equal(t, int64(2), clock.timers.Load(), "timers armed")
	clock.Advance(7*time.Second - time.Nanosecond)
	assert.False(t, fired(timer), "fired early")
	clock.Advance(time.Nanosecond)
	assert.True(t, fired(timer), "fires at the instant")
}

// A clock that runs by itself (every reading later) gets one timer, however
// often At could arm again.
func TestAtArmsOnceOnARunningClock(t *testing.T) {
	clock := &testClock{FakeClock: clockwork.NewFakeClock(), running: true}
	timer := clocktimer.At(clock, clock.Now().Add(time.Second))
	defer timer.Stop()
	assert.Equal(t, int64(1), clock.timers.Load(), "timers armed")
}

// The real clock, bare or wrapped: a few timers at most, and the timer
// fires.
func TestAtOnTheRealClock(t *testing.T) {
	for name, clock := range map[string]clockwork.Clock{
		"bare":    clockwork.NewRealClock(),
		"wrapped": struct{ clockwork.Clock }{clockwork.NewRealClock()},
	} {
		t.Run(name, func(t *testing.T) {
			counting := &countingClock{Clock: clock}
			timer := clocktimer.At(counting, counting.Now().Add(time.Millisecond))
			defer timer.Stop()
			<-timer.Chan()
			assert.LessOrEqual(t, counting.timers.Load(), int64(2), "timers armed")
		})
	}
}

// An instant that has passed, or is now: the timer fires at once.
func TestAtAnInstantPassed(t *testing.T) {
	clock := &testClock{FakeClock: clockwork.NewFakeClock()}
	for _, at := range []time.Time{clock.Now(), clock.Now().Add(-time.Hour)} {
		timer := clocktimer.At(clock, at)
		require.True(t, fired(timer), "fires at once")
	}
	assert.Equal(t, int64(2), clock.timers.Load(), "one timer each")
}

type countingClock struct {
	clockwork.Clock
	timers atomic.Int64
}

func (c *countingClock) NewTimer(d time.Duration) clockwork.Timer {
	c.timers.Add(1)
	return c.Clock.NewTimer(d)
}
