package observertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/observertest"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A Counter counts every event by kind, pipeline, node and detail: an
// observer for a test to compare with what it expects.
func ExampleCounter() {
	c := &observertest.Counter{}
	b := pipeline.New("orders", pipeline.WithObserver(c),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	checked := pipeline.Transform(b, "check", orders,
		pipelinetest.FailAlways(resilience.MarkPermanent(errors.New("bad item")), 2, 3))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	// Counts is a map: fmt prints it sorted by key.
	fmt.Println(c.Counts().Only(observertest.Drop, observertest.NodeCompleted))
	// Output:
	// map[drop{orders/check}:2 node_completed{orders/check}:1 node_completed{orders/read}:1 node_completed{orders/store}:1]
}

// dropCounter is an observer of one's own: it counts the items each node
// dropped, and can say what it saw, as Subject.Counts asks.
type dropCounter struct {
	observer.Nop
	mu     sync.Mutex
	counts observertest.Counts
}

func (d *dropCounter) OnDrop(e observer.DropEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = observertest.Counts{}
	}
	d.counts.Add(observertest.Key{Event: observertest.Drop, Pipeline: e.Pipeline, Node: e.Node}, 1)
}

func (d *dropCounter) Counts() (observertest.Counts, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.counts), nil
}

// Run checks an observer against scripted pipelines that produce every
// kind of event, concurrently. It needs a *testing.T, so this example is
// compiled but not run: the function below is a test of the observer's
// package.
func ExampleRun() {
	testDropCounter := func(t *testing.T) {
		d := &dropCounter{}
		observertest.Run(t, observertest.Subject{
			Observer: d,
			Events:   []observertest.Event{observertest.Drop},
			Counts:   d.Counts,
		})
	}
	_ = testDropCounter
}
