package pipeline

import "context"

// DrainAsked returns a channel that is closed once RunUntilSignal, whose
// run ctx belongs to, received its first signal; nil for a context that
// RunUntilSignal did not give. The signal test's child waits on it to be
// sure that a signal came before the run started.
func DrainAsked(ctx context.Context) <-chan struct{} {
	if r, ok := ctx.Value(drainRequestKey{}).(*drainRequest); ok {
		return r.asked
	}
	return nil
}
