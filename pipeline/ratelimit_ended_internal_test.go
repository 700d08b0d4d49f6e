package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/jonboulle/clockwork"
)

// wait on a context that has already ended books no token, as x/time's
// Limiter.Wait: withRateLimit then calls nothing, and a token booked for
// it would be lost to the next run (the bucket is shared across runs).
func TestLimiterWaitOnAnEndedContextTakesNoToken(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := newLimiter(1, 1, clock)
	ctx, cancel := context.WithCancelCause(t.Context())
	stopped := errors.New("stopped")
	cancel(stopped)
	if err := l.wait(ctx); !errors.Is(err, stopped) {
		t.Errorf("wait on an ended context = %v, want its cause %v", err, stopped)
	}
	if now, at := l.book(); at.After(now) {
		t.Errorf("the full bucket's token went to a call never made: the next call waits %v", at.Sub(now))
	}
}
