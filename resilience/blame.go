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

// IsBlameless reports whether err is not the item's fault: err is marked
// with [MarkBlameless], or every error it wraps is (each branch of a
// join, each cause of a wrapper), or it is context.Canceled (a
// cancellation that the pipeline's own did not cause, seen by the item's
// call, is something that happened to the item, not something it did).
// One error in the tree that is neither makes the whole the item's fault:
// a poison row's own error joined with its sibling part's cancellation is
// the row's.
func IsBlameless(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(*blamelessError); ok || err == context.Canceled {
		return true
	}
	switch x := err.(type) {
	case interface{ Unwrap() error }:
		if inner := x.Unwrap(); inner != nil {
			return IsBlameless(inner)
		}
	case interface{ Unwrap() []error }:
		errs := x.Unwrap()
		n := 0
		for _, e := range errs {
			if e == nil {
				continue
			}
			if !IsBlameless(e) {
				return false
			}
			n++
		}
		return n > 0
	}
	// A leaf: a cancellation only if it says it is one.
	return errors.Is(err, context.Canceled)
}

type blamelessError struct{ err error }

func (e *blamelessError) Error() string { return e.err.Error() }
func (e *blamelessError) Unwrap() error { return e.err }
