// Package observer defines how a running pipeline reports what happens to
// it: node lifecycle, retries, exhausted retries, dead letters, drops and
// circuit breaker transitions. Metrics and logging plug-ins implement
// [Observer]; [Nop] is a base to embed and [Multi] fans out to several.
//
// Per-item counts are not events: they are counters inside the engine, read
// with the pipeline's Stats method, so a pipeline that fails nothing calls
// its observers only when nodes start and complete.
package observer

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// An Observer receives a pipeline's events.
//
// Methods are called concurrently, from the goroutines that run the nodes,
// often on hot paths: an implementation must be safe for concurrent use,
// quick, and must not block. An event's fields must not be changed. A panic
// in an Observer fails the run with an error that names the event: it is a
// bug, and hiding it would hide every later event too.
type Observer interface {
	OnNodeStarted(NodeEvent)
	OnNodeCompleted(NodeEvent)
	OnRetry(RetryEvent)
	OnRetryExhausted(RetryExhaustedEvent)
	OnDeadLetter(DeadLetterEvent)
	OnDrop(DropEvent)
	OnCircuitStateChanged(CircuitEvent)
}

// Event is the part every event carries. It is embedded, so that events can
// grow without breaking observers.
type Event struct {
	// Pipeline is the name of the pipeline the event happened in.
	Pipeline string
	// RunID identifies the run: 16 random hex digits, new for each Run.
	RunID string
	// Node is the name of the node the event happened at.
	Node string
	// Time is when the event happened, on the pipeline's clock.
	Time time.Time
}

// A NodeEvent reports a node starting or completing. Err is the error the
// node completed with, nil on success; on start it is nil.
type NodeEvent struct {
	// Event is the pipeline, run, node and time of the event.
	Event
	// Err is the error the node completed with; nil on success and on
	// start.
	Err error
	// Stopped says the node did not fail itself: the run ended for another
	// reason, which Err holds, and the node stopped with it. StoppedBy
	// names the node whose failure ended the run; it is empty when the
	// caller cancelled the run. A node that failed itself, or ended on the
	// caller's deadline, is not Stopped.
	Stopped bool
	// StoppedBy names the node whose failure ended the run, when Stopped;
	// empty otherwise and when the caller cancelled the run.
	StoppedBy string
}

// A RetryEvent reports a retry about to wait: Attempt is the 1-based retry
// number of the layer Kind, Delay the wait actually chosen (jitter
// included), Err the failure that caused it.
type RetryEvent struct {
	// Event is the pipeline, run, node and time of the event.
	Event
	// Key is the item's correlation key (pipeline.SourceKey, or the item's
	// CorrelationID); empty for a node's own retries and unkeyed items.
	Key string
	// Kind is the layer that retries: item retry, node restart or node
	// retry.
	Kind resilience.RetryKind
	// Attempt is the retry's number in its layer, from 1 for the first
	// retry (the second call).
	Attempt int
	// Delay is the wait before the retry, jitter included; 0 retries at
	// once.
	Delay time.Duration
	// Err is the failure that caused the retry.
	Err error
	// HandedOff says the item's source took the retry over: its broker
	// waits Delay and delivers the item again (deadletter.HandOffSource),
	// and no worker waits meanwhile.
	HandedOff bool
}

// A RetryExhaustedEvent reports that a layer ran out of retries. Attempts
// counts every call, the first one included.
type RetryExhaustedEvent struct {
	// Event is the pipeline, run, node and time of the event.
	Event
	Key string // the item's correlation key, as in RetryEvent
	// Kind is the layer that ran out of retries.
	Kind resilience.RetryKind
	// Attempts counts the layer's calls, the first one included.
	Attempts int
	// Limit is what ended the retries: their count, MaxElapsed or the
	// retry budget.
	Limit resilience.Limit
	// Err is the last failure, which the retries did not get past.
	Err error
}

// A DeadLetterEvent reports an item sent to the dead-letter sink. Node is
// the node that decided; OriginNode is where the item failed. When
// BrokerRetry is set, the sink did not store the item: it gave it back to
// its broker's retry path, and the item is no dead letter.
type DeadLetterEvent struct {
	// Event is the pipeline, run and time of the event; its Node is the
	// node that decided to dead-letter the item.
	Event
	Key string // the item's correlation key, as in RetryEvent
	// OriginNode is the node where the item failed.
	OriginNode string
	// Attempts counts the calls made on the item, the first one included.
	Attempts int
	// Err is the item's last failure.
	Err error
	// BrokerRetry says the dead-letter sink gave the item back to the
	// broker it came from, to be delivered again, instead of storing it
	// (deadletter.BrokerRetrier): a broker retry, counted in
	// NodeStats.BrokerRetries and not in DeadLettered.
	BrokerRetry bool
}

// A DropEvent reports an item dropped on purpose because its node's
// OnItemFailure is Skip.
type DropEvent struct {
	// Event is the pipeline, run, node and time of the event.
	Event
	Key string // the item's correlation key, as in RetryEvent
	// Attempts counts the calls made on the item, the first one included.
	Attempts int
	// Err is the item's last failure.
	Err error
}

// A CircuitEvent reports a circuit breaker transition. Generation counts the
// breaker's transitions, which orders events that arrive concurrently.
type CircuitEvent struct {
	// Event is the pipeline, run, node and time of the event; Node is
	// the node whose breaker changed state.
	Event
	// From and To are the breaker's states before and after the change.
	From, To resilience.CircuitState
	// Generation is the count of the breaker's transitions, this one
	// included.
	Generation uint64
}

// Nop is an Observer that does nothing. Embed it to implement only the
// methods you need.
type Nop struct{}

func (Nop) OnNodeStarted(NodeEvent)              {}
func (Nop) OnNodeCompleted(NodeEvent)            {}
func (Nop) OnRetry(RetryEvent)                   {}
func (Nop) OnRetryExhausted(RetryExhaustedEvent) {}
func (Nop) OnDeadLetter(DeadLetterEvent)         {}
func (Nop) OnDrop(DropEvent)                     {}
func (Nop) OnCircuitStateChanged(CircuitEvent)   {}

// Multi returns an Observer that passes every event to each of obs in
// order, and the counters of the pipelines it observes to those of obs
// that are [StatsUser]s. Nil observers are left out, nil pointers held
// in an Observer included (a `var logs *slogobserver.Observer` left unset
// panicked at every event), and so is an observer given again, here or
// inside a Multi among obs: each gets every event once, where a metrics
// plug-in given twice would count each event twice. Observers that
// cannot be compared (a struct holding a func or map, given by value),
// and pointers to a type of size zero (which Go may give one address
// though they were made apart), are never taken for one another: given
// twice, they get each event twice.
func Multi(obs ...Observer) Observer {
	m := make(multi, 0, len(obs))
	var add func(o Observer)
	add = func(o Observer) {
		if inner, ok := o.(multi); ok {
			for _, o := range inner {
				add(o)
			}
			return
		}
		if o == nil || nilPointer(o) || slices.ContainsFunc(m, func(p Observer) bool { return same(p, o) }) {
			return
		}
		m = append(m, o)
	}
	for _, o := range obs {
		add(o)
	}
	return m
}

// nilPointer reports whether o holds a nil pointer.
func nilPointer(o Observer) bool {
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// same reports whether a and b are one observer. Observers whose type
// cannot be compared (a struct holding a func or map) are never the same
// as another, nor are pointers to a type of size zero, which Go may give
// one address though they were made apart.
func same(a, b Observer) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	if t := reflect.TypeOf(a); t.Kind() == reflect.Pointer && t.Elem().Size() == 0 {
		return false
	}
	return a == b
}

type multi []Observer

// UseStats passes r to every observer that reads counters; their errors
// are joined. When one refuses r, those that took it and are
// [StatsForgetter]s forget it again, as if r had never been handed over.
// A panic in one is an error of UseStats too.
func (m multi) UseStats(r StatsReader) error {
	var errs []error
	var took []StatsUser
	for _, o := range m {
		if u, ok := o.(StatsUser); ok {
			if err := useStats(u, r); err != nil {
				errs = append(errs, err)
			} else {
				took = append(took, u)
			}
		}
	}
	if len(errs) > 0 {
		for _, u := range took {
			if f, ok := u.(StatsForgetter); ok {
				// One that panics must not keep the others holding r.
				if v := forgetStats(f, r); v != nil {
					errs = append(errs, fmt.Errorf("ForgetStats panicked: %v", v))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// forgetStats calls f.ForgetStats, and returns what it panicked with.
func forgetStats(f StatsForgetter, r StatsReader) (panicked any) {
	defer func() { panicked = recover() }()
	f.ForgetStats(r)
	return nil
}

// useStats calls u.UseStats, turning a panic into an error.
func useStats(u StatsUser, r StatsReader) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("UseStats panicked: %v", v)
		}
	}()
	return u.UseStats(r)
}

// ForgetStats passes r on to every observer that can forget it. One that
// panics does not keep the others from forgetting r; its panic goes on
// once they have.
func (m multi) ForgetStats(r StatsReader) {
	var first any
	for _, o := range m {
		if f, ok := o.(StatsForgetter); ok {
			if v := forgetStats(f, r); v != nil && first == nil {
				first = v
			}
		}
	}
	if first != nil {
		panic(first)
	}
}

func (m multi) OnNodeStarted(e NodeEvent) {
	for _, o := range m {
		o.OnNodeStarted(e)
	}
}

func (m multi) OnNodeCompleted(e NodeEvent) {
	for _, o := range m {
		o.OnNodeCompleted(e)
	}
}

func (m multi) OnRetry(e RetryEvent) {
	for _, o := range m {
		o.OnRetry(e)
	}
}

func (m multi) OnRetryExhausted(e RetryExhaustedEvent) {
	for _, o := range m {
		o.OnRetryExhausted(e)
	}
}

func (m multi) OnDeadLetter(e DeadLetterEvent) {
	for _, o := range m {
		o.OnDeadLetter(e)
	}
}

func (m multi) OnDrop(e DropEvent) {
	for _, o := range m {
		o.OnDrop(e)
	}
}

func (m multi) OnCircuitStateChanged(e CircuitEvent) {
	for _, o := range m {
		o.OnCircuitStateChanged(e)
	}
}
