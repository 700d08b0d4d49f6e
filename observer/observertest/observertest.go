// Package observertest checks implementations of [observer.Observer], as
// testing/slogtest checks slog handlers.
//
// [Run] drives scripted pipelines that produce every kind of event: item
// retries on parallel workers, exhausted retries, skipped and
// dead-lettered items, a circuit breaker that opens, half-opens and closes,
// a node restart, a node retry and a run that fails. The pipelines run at
// the same time, all reporting to the one observer under test, so that a
// test run with -race finds unsynchronised state. Each pipeline also
// reports to a [Counter]; when the observer can say what it saw, Run
// compares that with what the Counter saw, and the Counter with the script.
//
//	func TestMyObserver(t *testing.T) {
//		obs := mine.New()
//		observertest.Run(t, observertest.Subject{
//			Observer: obs,
//			Events:   []observertest.Event{observertest.Retry, observertest.DeadLetter},
//			Counts:   func() (observertest.Counts, error) { return obs.Counts(), nil },
//		})
//	}
package observertest

import (
	"fmt"

	"github.com/sluicehq/sluice/observer"
)

// An Event names a kind of observer event, as counted in [Counts].
type Event string

// The kinds of events, one per method of [observer.Observer].
const (
	NodeStarted         Event = "node_started"
	NodeCompleted       Event = "node_completed"
	Retry               Event = "retry"
	RetryExhausted      Event = "retry_exhausted"
	DeadLetter          Event = "dead_letter"
	Drop                Event = "drop"
	CircuitStateChanged Event = "circuit_state_changed"
)

// AllEvents returns every kind of event, in the order of the methods of
// [observer.Observer].
func AllEvents() []Event {
	return []Event{NodeStarted, NodeCompleted, Retry, RetryExhausted, DeadLetter, Drop, CircuitStateChanged}
}

// A Key is what events are counted by: their kind, pipeline and node, and
// a detail that depends on the kind: the retry kind (such as "item_retry",
// the String of [resilience.RetryKind]) for Retry and RetryExhausted, the
// state the breaker turned to (such as "open", the String of
// [resilience.CircuitState]) for CircuitStateChanged, and "" for the rest.
type Key struct {
	// Event is the kind of event counted.
	Event Event
	// Pipeline is the name of the pipeline the event happened in.
	Pipeline string
	// Node is the name of the node the event happened at.
	Node string
	// Detail is the retry kind or the breaker's new state, as described
	// above; "" for the other events.
	Detail string
}

// String returns the key as event{pipeline/node detail}, for test output.
func (k Key) String() string {
	if k.Detail == "" {
		return fmt.Sprintf("%s{%s/%s}", k.Event, k.Pipeline, k.Node)
	}
	return fmt.Sprintf("%s{%s/%s %s}", k.Event, k.Pipeline, k.Node, k.Detail)
}

// Counts holds how many events were seen, by key. A key that was never
// seen is absent, never zero.
type Counts map[Key]int

// Add adds n to the count of k; a count that reaches zero is removed, so
// that counts compare equal whether or not they were built with zeros.
func (c Counts) Add(k Key, n int) {
	if v := c[k] + n; v != 0 {
		c[k] = v
	} else {
		delete(c, k)
	}
}

// Only returns the counts of the kinds of events in events.
func (c Counts) Only(events ...Event) Counts {
	keep := make(map[Event]bool, len(events))
	for _, e := range events {
		keep[e] = true
	}
	out := make(Counts)
	for k, v := range c {
		if keep[k.Event] {
			out[k] = v
		}
	}
	return out
}

// A Subject is an observer under test, with what Run needs to check it.
type Subject struct {
	// Observer receives the events of every pipeline Run drives. It is
	// shared by pipelines running at the same time.
	Observer observer.Observer

	// Events are the kinds of events Counts reports. Run compares the
	// counts of these kinds, and only these, with what happened.
	Events []Event

	// Counts, if not nil, returns what the observer saw so far. Run calls
	// it once every pipeline has returned. Counts of kinds not in Events
	// are ignored.
	Counts func() (Counts, error)
}
