package pipeline

import (
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/clocktimer"
)

// newTimerAt returns a timer on clock that fires at the instant at (at
// once when at has passed); see [clocktimer.At] for how it copes with a
// clock that moves while the timer is armed.
func newTimerAt(clock clockwork.Clock, at time.Time) clockwork.Timer {
	return clocktimer.At(clock, at)
}
