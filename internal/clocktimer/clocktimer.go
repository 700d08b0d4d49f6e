// Package clocktimer arms timers on a clockwork clock that fire at an
// instant rather than after a duration.
package clocktimer

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// tries bounds how often At arms again because the clock moved while it
// armed.
const tries = 8

// At returns a timer on clock that fires at the instant at (at once when
// at has passed).
//
// clockwork's timers take a duration, which the clock counts from the
// moment the timer is armed, not from the reading the duration was
// computed from: if the clock moves in between (another goroutine advances
// a fake clock, say), the timer fires late by that much. So At reads the
// clock again once the timer is armed; a reading that equals the one
// before means the timer was armed at that instant and fires exactly at
// at. If the clock moved, At reads it once more at once: a clock that
// moves between two back-to-back readings runs by itself (the real clock,
// bare or behind a wrapper), its timers fire late by their scheduling
// anyway and arming again would never catch up, so At keeps the timer it
// has. Otherwise something moved the clock while the timer was armed and
// At arms a new timer from the newer reading, at most tries times. So on a
// clock that runs by itself At arms one timer (a few at most, if two
// readings happen to be equal); it needs no test of the clock's type.
func At(clock clockwork.Clock, at time.Time) clockwork.Timer {
	now := clock.Now()
	t := clock.NewTimer(max(at.Sub(now), 0))
	for range tries {
		if !at.After(now) {
			return t // fires at once, which is at or after at
		}
		again := clock.Now()
		if !again.After(now) || clock.Now().After(again) {
			return t
		}
		t.Stop()
		now = again
		t = clock.NewTimer(max(at.Sub(now), 0))
	}
	return t
}
