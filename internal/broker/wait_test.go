package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/internal/broker"
)

// Wait returns when the clock has moved d, nil while its context lives,
// and at once with the context's cause when it ends.
func TestWait(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	done := make(chan error, 1)
	go func() { done <- broker.Wait(t.Context(), clock, time.Minute) }()
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Minute - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("returned before its time: %v", err)
	default:
	}
	clock.Advance(time.Nanosecond)
	require.NoError(t, <-done)

	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(t.Context())
	go func() { done <- broker.Wait(ctx, clock, time.Hour) }()
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	cancel(cause)
	assert.ErrorIs(t, <-done, cause)
	assert.ErrorIs(t, broker.Wait(ctx, clock, 0), cause, "no wait, but the cause")
	assert.NoError(t, broker.Wait(t.Context(), clock, -time.Second))
}
