package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A call cancelled while it waits gives its booking back: the next call
// waits only for the slot the cancelled one had.
func TestRateLimitCancelledWaitGivesItsSlotBack(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(1, 1, clock)
	require.NoError(t, l.wait(t.Context())) // the full bucket's token
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.wait(ctx) }() // books t0+1s
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(500 * time.Millisecond)
	cancel()
	require.Error(t, <-done)
	got := make(chan time.Time, 1)
	go func() { _ = l.wait(t.Context()); got <- clock.Now() }()
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	start := clock.Now()
	clock.Advance(500 * time.Millisecond)
	select {
	case at := <-got:
		assert.Equal(t, 500*time.Millisecond, at.Sub(start))
	case <-time.After(2 * time.Second):
		t.Fatal("the next call waits for the cancelled call's slot too")
	}
}
