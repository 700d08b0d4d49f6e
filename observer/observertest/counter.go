package observertest

import (
	"maps"
	"sync"

	"github.com/sluicehq/sluice/observer"
)

// A Counter is an observer that counts every event it receives by [Key].
// Its zero value is ready to use; it is safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts Counts
}

func (c *Counter) add(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(Counts)
	}
	c.counts[k]++
}

// Counts returns a copy of the counts so far.
func (c *Counter) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		return Counts{}
	}
	return maps.Clone(c.counts)
}

// OnNodeStarted counts the event.
func (c *Counter) OnNodeStarted(e observer.NodeEvent) {
	c.add(Key{Event: NodeStarted, Pipeline: e.Pipeline, Node: e.Node})
}

// OnNodeCompleted counts the event.
func (c *Counter) OnNodeCompleted(e observer.NodeEvent) {
	c.add(Key{Event: NodeCompleted, Pipeline: e.Pipeline, Node: e.Node})
}

// OnRetry counts the event, with the retry kind as detail.
func (c *Counter) OnRetry(e observer.RetryEvent) {
	c.add(Key{Event: Retry, Pipeline: e.Pipeline, Node: e.Node, Detail: e.Kind.String()})
}

// OnRetryExhausted counts the event, with the retry kind as detail.
func (c *Counter) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	c.add(Key{Event: RetryExhausted, Pipeline: e.Pipeline, Node: e.Node, Detail: e.Kind.String()})
}

// OnDeadLetter counts the event.
func (c *Counter) OnDeadLetter(e observer.DeadLetterEvent) {
	c.add(Key{Event: DeadLetter, Pipeline: e.Pipeline, Node: e.Node})
}

// OnDrop counts the event.
func (c *Counter) OnDrop(e observer.DropEvent) {
	c.add(Key{Event: Drop, Pipeline: e.Pipeline, Node: e.Node})
}

// OnCircuitStateChanged counts the event, with the new state as detail.
func (c *Counter) OnCircuitStateChanged(e observer.CircuitEvent) {
	c.add(Key{Event: CircuitStateChanged, Pipeline: e.Pipeline, Node: e.Node, Detail: e.To.String()})
}

var _ observer.Observer = (*Counter)(nil)
