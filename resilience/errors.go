package resilience

import (
	"errors"
	"fmt"
	"time"
)

// RetryKind names the resilience layer that repeated a unit of work.
type RetryKind int

const (
	// ItemRetry is layer 1: one item retried inside a transform or a sink.
	ItemRetry RetryKind = iota + 1
	// NodeRestart is layer 2: a node restarted from its checkpoint.
	NodeRestart
	// NodeRetry is layer 3: a whole node run again from the start.
	NodeRetry
)

// RetryKinds returns every layer, innermost first: ItemRetry, NodeRestart,
// NodeRetry. Code that keeps a count per layer ranges over it, so that it
// follows when a layer is added.
func RetryKinds() []RetryKind { return []RetryKind{ItemRetry, NodeRestart, NodeRetry} }

// String returns the layer's name in lower case words, as used in logs and
// metric labels: "item_retry", "node_restart" or "node_retry".
func (k RetryKind) String() string {
	switch k {
	case ItemRetry:
		return "item_retry"
	case NodeRestart:
		return "node_restart"
	case NodeRetry:
		return "node_retry"
	default:
		return fmt.Sprintf("RetryKind(%d)", int(k))
	}
}

// ErrRetryExhausted is matched by every [*RetryExhaustedError] with
// [errors.Is].
var ErrRetryExhausted = errors.New("resilience: retries exhausted")

// A RetryExhaustedError reports that a layer ran out of retries. Err is the
// error of the last attempt. It is always permanent for the classifiers of
// outer layers, so that an outer layer never multiplies an inner layer's
// retries.
type RetryExhaustedError struct {
	Node     string    // the node whose work failed
	Kind     RetryKind // the layer that gave up
	Attempts int       // calls made, the first one included
	Limit    Limit     // what ended the retries
	Err      error     // the last attempt's error
}

// Error returns a message naming the layer, the attempts and, unless it is
// the retry count, the limit that ended them. It leaves the node to the
// error that wraps it, a pipeline.NodeError, so that a message names the
// node once; the Node field holds it.
func (e *RetryExhaustedError) Error() string {
	if e.Limit != LimitCount {
		return fmt.Sprintf("resilience: %s exhausted after %d attempts (%s limit): %v", e.Kind, e.Attempts, e.Limit, e.Err)
	}
	return fmt.Sprintf("resilience: %s exhausted after %d attempts: %v", e.Kind, e.Attempts, e.Err)
}

// A Limit is what ended a layer's retries.
type Limit int

const (
	// LimitCount: the layer made its MaxRetries (or MaxRestarts) retries.
	// It is the zero value.
	LimitCount Limit = iota
	// LimitElapsed: the next retry would have started past MaxElapsed
	// from the first failure.
	LimitElapsed
	// LimitBudget: the shared retry budget was spent.
	LimitBudget
)

// Limits returns every Limit, in the order of their values: the values of
// the limit label of the metrics plug-ins.
func Limits() []Limit { return []Limit{LimitCount, LimitElapsed, LimitBudget} }

// String returns "count", "elapsed" or "budget".
func (l Limit) String() string {
	switch l {
	case LimitCount:
		return "count"
	case LimitElapsed:
		return "elapsed"
	case LimitBudget:
		return "budget"
	}
	return fmt.Sprintf("Limit(%d)", int(l))
}

// Is reports whether target is [ErrRetryExhausted], or
// [ErrBudgetExhausted] when the budget ended the retries.
func (e *RetryExhaustedError) Is(target error) bool {
	return target == ErrRetryExhausted || (e.Limit == LimitBudget && target == ErrBudgetExhausted)
}

// Unwrap returns the last attempt's error.
func (e *RetryExhaustedError) Unwrap() error { return e.Err }

// ErrPanic is matched by every [*PanicError] with [errors.Is].
var ErrPanic = errors.New("resilience: panic")

// A PanicError is a panic recovered from user code, with the value passed to
// panic and the stack of the goroutine that panicked. It is permanent: a
// panic is a bug, and repeating the call repeats the bug.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the stack of the goroutine that panicked.
	Stack []byte
}

// Error returns the panic value; the stack is in the Stack field.
func (e *PanicError) Error() string {
	return fmt.Sprintf("resilience: panic: %v", e.Value)
}

// Is reports whether target is [ErrPanic].
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value when it is an error, else nil.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// ErrCircuitOpen is matched by every [*CircuitOpenError] with [errors.Is].
var ErrCircuitOpen = errors.New("resilience: circuit open")

// A CircuitOpenError is a call refused by an open circuit breaker. It is
// permanent: the breaker already decided that calling now is pointless.
type CircuitOpenError struct {
	Node  string    // the node the breaker guards; empty outside a pipeline
	Until time.Time // when the breaker lets a probe through
}

// Error says when the breaker half-opens. Like [RetryExhaustedError] it
// leaves the node to the error that wraps it; the Node field holds it.
func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("resilience: circuit open until %s", e.Until.Format(time.RFC3339Nano))
}

// Is reports whether target is [ErrCircuitOpen].
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// ErrInvalidOptions is matched by every [*OptionError] with [errors.Is].
var ErrInvalidOptions = errors.New("resilience: invalid options")

// An OptionError reports one invalid setting. Field is the path of the
// setting from the value that was validated, such as
// "ItemRetry.Backoff.Factor".
type OptionError struct {
	// Field is the path of the setting, such as "ItemRetry.MaxRetries".
	Field string
	// Value is the setting's value.
	Value any
	// Reason says why the value is refused.
	Reason string
}

// Error names the field, its value and why it is refused.
func (e *OptionError) Error() string {
	return fmt.Sprintf("resilience: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidOptions].
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// optionErrors collects the problems found while validating; at returns a
// view that files problems under a sub-path into the same list.
type optionErrors struct {
	path string
	errs *[]error
}

func newOptionErrors() optionErrors { return optionErrors{errs: new([]error)} }

func (o optionErrors) add(field string, value any, reason string) {
	*o.errs = append(*o.errs, &OptionError{Field: joinPath(o.path, field), Value: value, Reason: reason})
}

func (o optionErrors) at(field string) optionErrors {
	return optionErrors{path: joinPath(o.path, field), errs: o.errs}
}

func (o optionErrors) err() error { return errors.Join(*o.errs...) }

func joinPath(prefix, field string) string {
	if prefix == "" {
		return field
	}
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// MarshalText returns the kind's name, so that it reads well in JSON.
func (k RetryKind) MarshalText() ([]byte, error) {
	switch k {
	case ItemRetry, NodeRestart, NodeRetry:
		return []byte(k.String()), nil
	case 0:
		return []byte(""), nil
	}
	return nil, fmt.Errorf("resilience: cannot encode unknown RetryKind(%d)", int(k))
}

// UnmarshalText parses a name written by MarshalText.
func (k *RetryKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "item_retry":
		*k = ItemRetry
	case "node_restart":
		*k = NodeRestart
	case "node_retry":
		*k = NodeRetry
	case "":
		*k = 0
	default:
		return fmt.Errorf("resilience: unknown retry kind %q", b)
	}
	return nil
}

// ErrAttemptTimeout is matched by the error of a call that ran past its
// [ItemRetryOptions.AttemptTimeout]. The default classifier judges it
// transient.
var ErrAttemptTimeout = errors.New("resilience: attempt timed out")

// An AttemptTimeoutError is the error of a call that ran past its
// AttemptTimeout: it matches [ErrAttemptTimeout] and unwraps to what the
// call returned.
type AttemptTimeoutError struct {
	// Timeout is the AttemptTimeout the call ran past.
	Timeout time.Duration
	// Err is what the call returned.
	Err error
}

func (e *AttemptTimeoutError) Error() string {
	return fmt.Sprintf("resilience: attempt timed out after %s: %v", e.Timeout, e.Err)
}

// Is reports whether target is [ErrAttemptTimeout].
func (e *AttemptTimeoutError) Is(target error) bool { return target == ErrAttemptTimeout }

// Unwrap returns the call's own error.
func (e *AttemptTimeoutError) Unwrap() error { return e.Err }

// RetryAfter marks err with the delay its source asked for (an HTTP 429 or
// 503 Retry-After, a broker's throttle): the retrying layer waits d
// (capped by its backoff's MaxDelay, when set) instead of its own curve,
// without jitter. An error with a method RetryAfter() time.Duration
// anywhere in its chain counts the same. Either is transient for the
// default classifier, unless marked permanent. A negative d counts as 0.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, d: max(d, 0)}
}

type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.d }

// RetryAfterOf returns the delay err asks for: that of the first error in
// its chain with a method RetryAfter() time.Duration (see [RetryAfter]),
// at least 0.
func RetryAfterOf(err error) (time.Duration, bool) {
	// A walk of type assertions, as errors.As would do, without its
	// reflection: this runs on every retry.
	for err != nil {
		if ra, ok := err.(interface{ RetryAfter() time.Duration }); ok {
			return max(ra.RetryAfter(), 0), true
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if d, ok := RetryAfterOf(e); ok {
					return d, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}
