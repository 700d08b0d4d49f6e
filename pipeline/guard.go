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

// stopEvery is how many items a loop over a run of items, or a source's
// Emit, goes between two looks at the run's context. Looking costs about
// 3 ns, a cost worth sharing: a stopping run calls the user's code on at
// most stopEvery more items per worker. A power of two, so that the count
// is masked rather than divided.
const stopEvery = 8

// guard calls f under recovered.
func guard[R any](f func() (R, error)) (r R, err error) {
	defer recovered(&err)
	return f()
}
