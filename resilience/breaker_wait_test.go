package resilience_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

// armMovingClock moves itself forward just before it arms its next timer,
// once told to: the clock moved after the reading the timer's duration was
// computed from.
type armMovingClock struct {
	*clockwork.FakeClock
	by atomic.Int64
}

func (c *armMovingClock) NewTimer(d time.Duration) clockwork.Timer {
	if by := c.by.Swap(0); by > 0 {
		c.Advance(time.Duration(by))
	}
	return c.FakeClock.NewTimer(d)
}

// Wait lets a probe through when the clock reaches the end of the open
// state, even when the clock moved while Wait armed its timer: the timer
// is armed at that instant, not for the time left at an earlier reading.
func TestBreakerWaitEndsOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := &armMovingClock{FakeClock: clockwork.NewFakeClock()}
		o := resilience.DefaultCircuitBreaker()
		o.Enabled, o.ConsecutiveFailures, o.OpenDuration = true, 1, 10*time.Second
		b := resilience.NewBreaker("call", o, clock, nil)
		p, err := b.Allow()
		require.NoError(t, err)
		b.Record(p, resilience.CallFailure)
		opened := clock.Now()
		require.Equal(t, resilience.CircuitOpen, b.State())

		clock.by.Store(int64(4 * time.Second))
		got := make(chan error, 1)
		go func() {
			p, err := b.Wait(t.Context(), opened.Add(time.Hour))
			if err == nil {
				b.Record(p, resilience.CallSuccess)
			}
			got <- err
		}()
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "Wait waits on the clock")
		clock.Advance(opened.Add(o.OpenDuration).Sub(clock.Now()))
		select {
		case err := <-got:
			assert.NoError(t, err, "a probe when the open state ends")
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not end when the open state did: its timer fires late by the clock's move")
		}
	}
}
