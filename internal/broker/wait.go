package broker

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Wait waits d on clock, or until ctx is done; it returns ctx's cause, nil
// while ctx lives. A d of 0 or less does not wait.
func Wait(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return context.Cause(ctx)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
