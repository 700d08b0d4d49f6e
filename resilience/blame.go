package resilience

import (
	"context"
	"errors"
)

// MarkBlameless wraps err to say that the failure is not the fault of the
// item being processed: a resource it needs is busy (an idempotency key
// claimed by another consumer), a lock is held, the work was cancelled by
// something other than the item. The mark changes no classification (use
// [MarkTransient] too for a failure worth retrying); it changes what a
// failure does to the item under the Fail action: the run fails, but the
// item ends node.Failed, not node.Rejected, so that a broker source does
// not count the run against the message as a poison one. Under DeadLetter,
// an item that its source delivers again (a tracked one) is not
// dead-lettered: it ends node.Failed and the run goes on. It returns nil
// for a nil err.
func MarkBlameless(err error) error {
	if err == nil {
		return nil
	}
	return &blamelessError{err}
}

// IsBlameless reports whether err is not the item's fault: err's tree holds
// an error wrapped by [MarkBlameless], or context.Canceled (a cancellation
// that the pipeline's own did not cause, seen by the item's call, is
// something that happened to the item, not something it did).
func IsBlameless(err error) bool {
	var b *blamelessError
	return errors.As(err, &b) || errors.Is(err, context.Canceled)
}

type blamelessError struct{ err error }

func (e *blamelessError) Error() string { return e.err.Error() }
func (e *blamelessError) Unwrap() error { return e.err }
