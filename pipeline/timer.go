package pipeline

import (
	"reflect"
	"time"

	"github.com/jonboulle/clockwork"
)

// timerAtTries bounds how often newTimerAt arms again because the clock
// moved while it armed: a clock that moves on every reading (a real clock
// behind a wrapper) would otherwise keep it arming.
const timerAtTries = 8

// newTimerAt returns a timer on clock that fires at the instant at (at
// once when at has passed).
//
// clockwork's timers take a duration, which the clock counts from the
// moment the timer is armed, not from the reading the duration was
// computed from: if the clock moves in between (another goroutine
// advances a fake clock, say), the timer fires late by that much. So
// newTimerAt reads the clock again once the timer is armed and, if it
// moved, arms a new timer from the newer reading; a reading taken after
// arming that equals the one before means the timer was armed at that
// instant and fires exactly at at. On the real clock a timer fires late
// by its scheduling anyway, and the clock moves between any two readings,
// so it arms once.
func newTimerAt(clock clockwork.Clock, at time.Time) clockwork.Timer {
	now := clock.Now()
	t := clock.NewTimer(max(at.Sub(now), 0))
	if reflect.TypeOf(clock) == realClockType {
		return t
	}
	for range timerAtTries {
		again := clock.Now()
		if !again.After(now) || !at.After(now) {
			return t
		}
		// The clock moved while the timer was armed: it may fire late by
		// up to again-now. A timer that fired already fired at or after at.
		t.Stop()
		now = again
		t = clock.NewTimer(max(at.Sub(now), 0))
	}
	return t
}
