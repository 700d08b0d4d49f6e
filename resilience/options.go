// Package resilience holds the policies of Sluice's resilience layers as
// plain values: [Backoff] curves with [Jitter], the [Classifier] that tells
// transient errors from permanent ones, the [Options] of the three layers
// (item retry, node restart, node retry), the [Breaker] state machine, and
// the error types the engine returns.
//
// Nothing here starts a goroutine or reads the real clock: the breaker is
// driven by an injected [clockwork.Clock] and jitter by an injectable
// [Rand], so every policy can be tested exactly. The package imports no
// other package of the module; the pipeline package applies these values.
//
// Most programs start from [ForProfile] and change a field or two:
//
//	o := resilience.ForProfile(resilience.ProfileDefault)
//	o.ItemRetry.MaxRetries = 5
//	o.ItemRetry.Classifier = resilience.Classifier{}.TransientIs(ErrBusy)
package resilience

import (
	"fmt"
	"time"
)

// MaxRepeats is the most times one policy may ask to repeat one unit of
// work. A setting above it is refused by Validate: a dependency that has
// failed a hundred times in a row is not coming back within the run, and
// more repeats only hide that.
const MaxRepeats = 100

// FailureAction says what happens to an item whose retries ran out or whose
// error is permanent.
type FailureAction int

const (
	// Fail fails the node, which ends the run. It is the zero value.
	Fail FailureAction = iota
	// Skip drops the item on purpose; observers see OnDrop and a tracked
	// item ends Skipped.
	Skip
	// DeadLetter sends the item in an envelope to the pipeline's dead-letter
	// sink; a tracked item ends DeadLettered.
	DeadLetter
)

// String returns the action's name in lower case.
func (a FailureAction) String() string {
	switch a {
	case Fail:
		return "fail"
	case Skip:
		return "skip"
	case DeadLetter:
		return "dead_letter"
	default:
		return fmt.Sprintf("FailureAction(%d)", int(a))
	}
}

// ItemRetryOptions configure layer 1: one item retried inside a transform or
// a sink. MaxRetries = 3 allows 4 calls.
type ItemRetryOptions struct {
	// MaxRetries is the retries after the first call, at most
	// [MaxRepeats]; 0 calls once.
	MaxRetries int
	// Backoff is the wait before each retry; the zero value retries at
	// once.
	Backoff Backoff
	// Classifier judges which errors are retried; the zero value is the
	// default classifier.
	Classifier Classifier
	// MaxElapsed, when positive, caps the time layer 1 spends on one item:
	// no retry starts once MaxElapsed has passed since the item's first
	// failure in this attempt (a retry whose delay would end past it is
	// not waited for, nor one that would wait past it for a breaker under
	// OpenPause), and the item's error is then a
	// *RetryExhaustedError with Limit LimitElapsed. 0, the default, sets
	// no cap.
	MaxElapsed time.Duration
	// AttemptTimeout, when positive, bounds each call: the call's context
	// has that deadline (on the pipeline's clock), and a call that fails
	// after it passed fails with an error matching [ErrAttemptTimeout],
	// transient by default, so it is retried. A call that ignores its
	// context keeps its worker until it returns. 0, the default, sets no
	// deadline.
	AttemptTimeout time.Duration
}

// NodeRestartOptions configure layer 2: a node whose stream failed is
// restarted, after Backoff, from its checkpoint, the first input item whose
// outcome is not yet known. Items between the checkpoint and the read head
// are held in a replay window of at most MaxReplayWindow items; a full
// window stops reading, which is backpressure, never an error. After
// ResetAfterItems items leave the node without failing it the restart count
// starts again from 0; 0 never resets it. Layer 2 has no classifier.
type NodeRestartOptions struct {
	// MaxRestarts is how many times the node is restarted after its stream
	// failed, at most [MaxRepeats]; 0, the default, restarts nothing.
	MaxRestarts int
	// Backoff is the wait before each restart; the zero value restarts at
	// once.
	Backoff Backoff
	// MaxReplayWindow is the most input items held for replay, between
	// the checkpoint and the read head; a full window stops reading. It
	// must be above 0 when MaxRestarts is; the profiles give
	// [DefaultReplayWindow].
	MaxReplayWindow int
	// ResetAfterItems starts the restart count again from 0 after this
	// many items left the node without failing it (delivered, or skipped
	// or dead-lettered by their failure action); 0, the default, never
	// resets it.
	ResetAfterItems int
	// MaxElapsed, when positive, caps the time layer 2 spends: no restart
	// starts once MaxElapsed has passed since the node's first failure (of
	// this sequence of restarts; ResetAfterItems starts a new one), and
	// the node's error is then a *RetryExhaustedError with Limit
	// LimitElapsed. 0, the default, sets no cap.
	MaxElapsed time.Duration
}

// NodeRetryOptions configure layer 3: a node that failed before it consumed
// any input (a source before its first emit, an Open that failed) is run
// again from the start, for errors its Classifier judges transient.
type NodeRetryOptions struct {
	// MaxRetries is how many times the node is run again, at most
	// [MaxRepeats]; 0 runs it once.
	MaxRetries int
	// Backoff is the wait before each run again; the zero value runs it
	// again at once.
	Backoff Backoff
	// Classifier judges which failures are retried; the zero value is the
	// default classifier.
	Classifier Classifier
	// MaxElapsed, when positive, caps the time layer 3 spends: no retry
	// starts once MaxElapsed has passed since the node's first failure,
	// and the node's error is then a *RetryExhaustedError with Limit
	// LimitElapsed. 0, the default, sets no cap.
	MaxElapsed time.Duration
}

// Options are the resilience settings of one node, or the defaults of a
// pipeline. Start from [ForProfile] and change what you need; a zero Options
// retries nothing, restarts nothing and fails on the first error.
type Options struct {
	// ItemRetry is layer 1, one item retried; the zero value calls each
	// item once.
	ItemRetry ItemRetryOptions
	// NodeRestart is layer 2, a failed node restarted from its
	// checkpoint; the zero value restarts nothing.
	NodeRestart NodeRestartOptions
	// NodeRetry is layer 3, a node that failed before consuming input run
	// again; the zero value runs it once.
	NodeRetry NodeRetryOptions
	// CircuitBreaker guards every item call of the node; the zero value,
	// like the profiles' [DefaultCircuitBreaker], is off.
	CircuitBreaker CircuitBreakerOptions
	// OnItemFailure is what happens to an item that layer 1 gave up on,
	// unless a FailureRule decides. The zero value is Fail.
	OnItemFailure FailureAction
	// RetryBudget, when not nil, bounds layer 1's retries of every node that
	// shares it (see [Budget]): with the budget spent, a failed item is not
	// retried but goes to its failure action at once, its error a
	// *RetryExhaustedError with Limit LimitBudget that matches
	// ErrBudgetExhausted. Nil, the default, bounds nothing.
	RetryBudget *Budget
	// FailureRules pick the failure action by the error: the first rule
	// whose Match reports true for the item's error (as layer 1 returns
	// it: errors.Is and errors.As see through its wrapping) decides, else
	// OnItemFailure. A validation error can be skipped, a 4xx
	// dead-lettered, an authentication failure fail the run. None by
	// default.
	FailureRules []FailureRule
}

// A FailureRule gives the failure action of the errors it matches. Match
// is the user's code: it runs under the engine's panic guard, and a panic
// fails the node with a *PanicError.
type FailureRule struct {
	// Match reports whether the rule decides for err. It must not be nil.
	Match func(error) bool
	// Action is what happens to an item whose error Match accepts; the
	// zero value is Fail.
	Action FailureAction
}

// Profile names a starting set of [Options] and engine settings.
type Profile int

const (
	// ProfileDefault retries an item 3 times with exponential backoff from
	// 200 ms up to 30 s with full jitter, and runs a node again up to 3 times
	// when it fails transiently before consuming anything. Node restart is
	// off; the circuit breaker is configured but off.
	ProfileDefault Profile = iota
	// ProfileHighThroughput retries nothing; the pipeline also uses larger
	// buffers and hands items over between stages in batches.
	ProfileHighThroughput
)

// String returns the profile's name.
func (p Profile) String() string {
	switch p {
	case ProfileDefault:
		return "default"
	case ProfileHighThroughput:
		return "high_throughput"
	default:
		return fmt.Sprintf("Profile(%d)", int(p))
	}
}

// DefaultReplayWindow is the MaxReplayWindow of both profiles.
const DefaultReplayWindow = 10_000

// ForProfile returns the Options of profile p. An unknown profile gives the
// default profile's Options.
func ForProfile(p Profile) Options {
	o := Options{
		ItemRetry: ItemRetryOptions{
			MaxRetries: 3,
			Backoff:    Exponential(200 * time.Millisecond).WithMaxDelay(30 * time.Second),
		},
		NodeRestart: NodeRestartOptions{
			MaxRestarts:     0,
			Backoff:         Exponential(time.Second).WithMaxDelay(time.Minute),
			MaxReplayWindow: DefaultReplayWindow,
		},
		NodeRetry: NodeRetryOptions{
			MaxRetries: 3,
			Backoff:    Exponential(time.Second).WithMaxDelay(30 * time.Second),
		},
		CircuitBreaker: DefaultCircuitBreaker(),
		OnItemFailure:  Fail,
	}
	if p == ProfileHighThroughput {
		o.ItemRetry.MaxRetries = 0
		o.NodeRetry.MaxRetries = 0
	}
	return o
}

// Validate reports every problem of o, joined; each is an [*OptionError]
// whose Field is the path of the setting, such as "ItemRetry.Backoff.Factor".
func (o Options) Validate() error {
	errs := newOptionErrors()
	o.validate(errs)
	return errs.err()
}

func (o Options) validate(errs optionErrors) {
	repeats(errs, "ItemRetry.MaxRetries", o.ItemRetry.MaxRetries)
	o.ItemRetry.Backoff.validate(errs.at("ItemRetry.Backoff"))
	if o.NodeRestart.MaxElapsed < 0 {
		errs.add("NodeRestart.MaxElapsed", o.NodeRestart.MaxElapsed, "must not be negative")
	}
	if o.NodeRetry.MaxElapsed < 0 {
		errs.add("NodeRetry.MaxElapsed", o.NodeRetry.MaxElapsed, "must not be negative")
	}
	if o.ItemRetry.MaxElapsed < 0 {
		errs.add("ItemRetry.MaxElapsed", o.ItemRetry.MaxElapsed, "must not be negative")
	}
	if o.ItemRetry.AttemptTimeout < 0 {
		errs.add("ItemRetry.AttemptTimeout", o.ItemRetry.AttemptTimeout, "must not be negative")
	}

	repeats(errs, "NodeRestart.MaxRestarts", o.NodeRestart.MaxRestarts)
	o.NodeRestart.Backoff.validate(errs.at("NodeRestart.Backoff"))
	if o.NodeRestart.MaxReplayWindow < 0 || (o.NodeRestart.MaxRestarts > 0 && o.NodeRestart.MaxReplayWindow == 0) {
		errs.add("NodeRestart.MaxReplayWindow", o.NodeRestart.MaxReplayWindow,
			"must be above 0 when restarts are allowed: it bounds the items held for replay")
	}
	if o.NodeRestart.ResetAfterItems < 0 {
		errs.add("NodeRestart.ResetAfterItems", o.NodeRestart.ResetAfterItems, "must not be negative (0 never resets)")
	}

	repeats(errs, "NodeRetry.MaxRetries", o.NodeRetry.MaxRetries)
	o.NodeRetry.Backoff.validate(errs.at("NodeRetry.Backoff"))

	o.CircuitBreaker.validate(errs.at("CircuitBreaker"))
	if cb := o.CircuitBreaker; cb.Enabled && cb.WhenOpen == OpenPause && cb.OpenDuration > 0 {
		// A paused item is probed once per OpenDuration, and a failed probe
		// spends no retry: the probes of one pause, with the item's own
		// calls, must stay within the repeat cap.
		if probes := cb.PauseProbes(); probes+o.ItemRetry.MaxRetries+1 > MaxRepeats+1 {
			errs.add("CircuitBreaker.MaxPause", cb.MaxPause, fmt.Sprintf(
				"with OpenDuration %s a paused item can be probed %d times, which with ItemRetry.MaxRetries %d is more than %d calls of one item",
				cb.OpenDuration, probes, o.ItemRetry.MaxRetries, MaxRepeats+1))
		}
	}

	switch o.OnItemFailure {
	case Fail, Skip, DeadLetter:
	default:
		errs.add("OnItemFailure", o.OnItemFailure, "unknown failure action")
	}
	if o.RetryBudget != nil {
		o.RetryBudget.validate(errs.at("RetryBudget"))
	}
	for i, r := range o.FailureRules {
		field := fmt.Sprintf("FailureRules[%d]", i)
		if r.Match == nil {
			errs.add(field+".Match", "nil", "a rule needs a Match function")
		}
		switch r.Action {
		case Fail, Skip, DeadLetter:
		default:
			errs.add(field+".Action", r.Action, "unknown failure action")
		}
	}
}

func repeats(errs optionErrors, field string, n int) {
	switch {
	case n < 0:
		errs.add(field, n, "must not be negative")
	case n > MaxRepeats:
		errs.add(field, n, fmt.Sprintf("must be at most %d", MaxRepeats))
	}
}
