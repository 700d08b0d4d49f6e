package resilience

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"time"
)

// A Classifier decides whether an error is transient (worth another
// attempt) or permanent. It is immutable: [Classifier.Transient] and the
// other rule methods return a new Classifier, so one value can be shared by
// many nodes and goroutines.
//
// A zero Classifier is the default classifier.
//
// An error is judged in this order, each step looking at every error of the
// wrapped tree ([fmt.Errorf] with %w, [errors.Join]):
//
//  1. Always permanent: the pipeline's own cancellation (see
//     [Classifier.IsTransientContext]), [context.Canceled], a
//     [*RetryExhaustedError], an error wrapped by [MarkPermanent] or
//     [MarkRetried], a [*PanicError] and a [*CircuitOpenError].
//  2. The user's rules, in the order they were added; the first rule that
//     matches any error of the tree decides.
//  3. [AllTransient]: everything else is transient.
//  4. The default transient rules: [context.DeadlineExceeded],
//     [os.ErrDeadlineExceeded], a [net.Error] whose Timeout() is true,
//     ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE, ETIMEDOUT,
//     [io.ErrUnexpectedEOF], an error with a StatusCode() int of 408, 429 or
//     5xx, an error with a Temporary() bool that is true, and an error
//     wrapped by [MarkTransient].
//  5. Everything else is permanent.
type Classifier struct {
	rules []rule
	all   bool
}

type rule struct {
	match     func(error) bool
	transient bool
}

// AllTransient returns a Classifier that retries every error but those that
// are always permanent: the pipeline's own cancellation, exhausted retries,
// marked permanent or already retried errors, panics and open breakers.
func AllTransient() Classifier { return Classifier{all: true} }

// Transient returns a copy of c with one more rule: an error for which match
// returns true is transient. match sees each error of the wrapped tree.
func (c Classifier) Transient(match func(error) bool) Classifier {
	return c.with(rule{match: match, transient: true})
}

// Permanent returns a copy of c with one more rule: an error for which match
// returns true is permanent. match sees each error of the wrapped tree.
func (c Classifier) Permanent(match func(error) bool) Classifier {
	return c.with(rule{match: match, transient: false})
}

// TransientIs returns a copy of c that judges transient any error for which
// [errors.Is](err, target) holds.
func (c Classifier) TransientIs(target error) Classifier {
	return c.with(rule{match: isTarget(target), transient: true})
}

// PermanentIs returns a copy of c that judges permanent any error for which
// [errors.Is](err, target) holds.
func (c Classifier) PermanentIs(target error) Classifier {
	return c.with(rule{match: isTarget(target), transient: false})
}

// TransientAs returns a copy of c that judges transient an error of type E
// in the tree for which every given condition holds.
func TransientAs[E error](c Classifier, conds ...func(E) bool) Classifier {
	return c.with(rule{match: asType(conds), transient: true})
}

// PermanentAs returns a copy of c that judges permanent an error of type E
// in the tree for which every given condition holds.
func PermanentAs[E error](c Classifier, conds ...func(E) bool) Classifier {
	return c.with(rule{match: asType(conds), transient: false})
}

func (c Classifier) with(r rule) Classifier {
	if r.match == nil {
		panic("sluice: classifier rule with a nil function")
	}
	// Clip so that two classifiers derived from c never share the array
	// their new rules are appended to.
	c.rules = append(slices.Clip(c.rules), r)
	return c
}

func isTarget(target error) func(error) bool {
	// errors.Is walks the tree on its own; matching the node itself keeps
	// the rule's view the same as every other rule's.
	return func(err error) bool { return err == target || isMethod(err, target) }
}

func isMethod(err, target error) bool {
	if x, ok := err.(interface{ Is(error) bool }); ok {
		return x.Is(target)
	}
	return false
}

func asType[E error](conds []func(E) bool) func(error) bool {
	return func(err error) bool {
		e, ok := err.(E)
		if !ok {
			return false
		}
		for _, cond := range conds {
			if !cond(e) {
				return false
			}
		}
		return true
	}
}

// IsTransient reports whether c judges err transient outside a pipeline. A
// nil error is not transient.
func (c Classifier) IsTransient(err error) bool {
	return c.IsTransientContext(context.Background(), err)
}

// IsTransientContext reports whether c judges err transient for work done
// under ctx, the pipeline's own context: once ctx is done, every error is
// permanent, so that the pipeline's cancellation and deadline are never
// retried. A [context.DeadlineExceeded] from a deadline of the user's own is
// transient while ctx is live.
func (c Classifier) IsTransientContext(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if anyInTree(err, alwaysPermanent) {
		return false
	}
	for _, r := range c.rules {
		if anyInTree(err, r.match) {
			return r.transient
		}
	}
	if c.all {
		return true
	}
	return anyInTree(err, defaultTransient)
}

// IsTransient reports whether the default classifier judges err transient.
func IsTransient(err error) bool { return Classifier{}.IsTransient(err) }

// anyInTree reports whether match holds for err or any error it wraps,
// depth first, following both Unwrap() error and Unwrap() []error.
func anyInTree(err error, match func(error) bool) bool {
	for err != nil {
		if match(err) {
			return true
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if anyInTree(e, match) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

func alwaysPermanent(err error) bool {
	switch err.(type) {
	case *RetryExhaustedError, *PanicError, *CircuitOpenError, *permanentError, *retriedError:
		return true
	}
	return err == context.Canceled
}

var transientErrnos = []syscall.Errno{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
}

func defaultTransient(err error) bool {
	switch err {
	case context.DeadlineExceeded, os.ErrDeadlineExceeded, io.ErrUnexpectedEOF, ErrAttemptTimeout:
		return true
	}
	if _, ok := err.(*AttemptTimeoutError); ok {
		return true
	}
	if _, ok := err.(interface{ RetryAfter() time.Duration }); ok {
		return true // it says when to retry
	}
	if errno, ok := err.(syscall.Errno); ok && slices.Contains(transientErrnos, errno) {
		return true
	}
	if _, ok := err.(*transientError); ok {
		return true
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return true
	}
	if sc, ok := err.(interface{ StatusCode() int }); ok {
		code := sc.StatusCode()
		if code == 408 || code == 429 || (code >= 500 && code <= 599) {
			return true
		}
	}
	if t, ok := err.(interface{ Temporary() bool }); ok && t.Temporary() {
		return true
	}
	return false
}

// MarkTransient wraps err so that every classifier judges it transient
// unless it is also always permanent. It returns nil for a nil err.
func MarkTransient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// MarkPermanent wraps err so that every classifier judges it permanent. It
// returns nil for a nil err.
func MarkPermanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// MarkRetried wraps err to say that attempts calls were already made, by a
// connector or a client library that retries on its own. Such an error is
// permanent, so that the pipeline's layers do not multiply those retries.
// It returns nil for a nil err.
func MarkRetried(err error, attempts int) error {
	if err == nil {
		return nil
	}
	return &retriedError{err: err, attempts: attempts}
}

// RetriedAttempts returns the attempts recorded by [MarkRetried] in err's
// tree, and whether there was such a mark.
func RetriedAttempts(err error) (int, bool) {
	var r *retriedError
	if errors.As(err, &r) {
		return r.attempts, true
	}
	return 0, false
}

type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type retriedError struct {
	err      error
	attempts int
}

func (e *retriedError) Error() string { return e.err.Error() }
func (e *retriedError) Unwrap() error { return e.err }
