package pipeline

import (
	"fmt"
	"runtime/debug"

	"github.com/sluicehq/sluice/resilience"
)

// recovered turns a panic into a *resilience.PanicError in *err, with the
// value and the stack. It is the one guard around user code: every call of
// a user's function, method or callback runs under
//
//	defer recovered(&err)
//
// so that a panic there becomes an error of the call, however deep.
func recovered(err *error) {
	if v := recover(); v != nil {
		*err = &resilience.PanicError{Value: v, Stack: debug.Stack()}
	}
}

// recoveredPolicy is recovered for a user's policy (a classifier rule, a
// custom backoff, CorrelationID): a panic there is a bug of the policy,
// not of the item, so it fails the node, naming what panicked, and node
// restart does not repeat it.
func recoveredPolicy(what string, err *error) {
	if v := recover(); v != nil {
		*err = &notRestartable{fmt.Errorf("pipeline: %s panicked: %w", what, &resilience.PanicError{Value: v, Stack: debug.Stack()})}
	}
}

// protect calls f under recovered.
func protect(f func()) (err error) {
	defer recovered(&err)
	f()
	return nil
}

// stopped reports, without waiting, whether done is closed: a context's
// Done channel, fetched once for a run of items. Polling it is the
// cheapest way to look at the run's one stop signal on every item.
func stopped(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// guard calls f under recovered.
func guard[R any](f func() (R, error)) (r R, err error) {
	defer recovered(&err)
	return f()
}
