package observer_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// printDrops reports each item a node dropped. Embedding Nop supplies the
// methods of the events it does not want.
type printDrops struct{ observer.Nop }

func (printDrops) OnDrop(e observer.DropEvent) {
	fmt.Printf("%s dropped an item after %d attempt(s): %v\n", e.Node, e.Attempts, e.Err)
}

// summary is a StatsUser: Build hands it the pipeline's live counters,
// which it reads when it likes (here once the run is over) instead of
// counting items from events.
type summary struct {
	observer.Nop
	stats observer.StatsReader
}

func (s *summary) UseStats(r observer.StatsReader) error {
	s.stats = r
	return nil
}

func (s *summary) print() {
	for _, n := range s.stats.Stats().Nodes {
		fmt.Printf("%s %s: in %d, out %d, skipped %d\n", n.Kind, n.Node, n.In, n.Out, n.Skipped)
	}
}

// An observer implements only what it needs on top of Nop; Multi hands the
// events to several, and the pipeline's counters to those that are
// StatsUsers.
func Example() {
	sum := &summary{}
	b := pipeline.New("orders", pipeline.WithObserver(observer.Multi(printDrops{}, sum)),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3, 4))
	checked := pipeline.Transform(b, "check", orders, node.TransformFunc[int, int](func(_ context.Context, id int) (int, error) {
		if id == 3 {
			return 0, resilience.MarkPermanent(fmt.Errorf("order %d has no lines", id))
		}
		return id, nil
	}))
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
	sum.print()
	// Output:
	// check dropped an item after 1 attempt(s): order 3 has no lines
	// source read: in 0, out 4, skipped 0
	// transform check: in 4, out 3, skipped 1
	// sink store: in 3, out 3, skipped 0
}
