package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

type Order struct {
	ID    string
	Cents int
}

// Example_readme is the README's example, with small stand-ins for the
// source, the transforms and the store.
func Example_readme() {
	ctx := context.Background()
	dlq := deadletter.NewMemory(100) // the README uses deadletter.OpenFile
	csvSource := pipelinetest.NewSliceSource("a1,250", "b2,oops", "c3,1000")
	parse := node.TransformFunc[string, Order](func(_ context.Context, row string) (Order, error) {
		id, amount, _ := strings.Cut(row, ",")
		cents, err := strconv.Atoi(amount)
		if err != nil {
			return Order{}, resilience.MarkPermanent(fmt.Errorf("row %q: amount: %w", row, err))
		}
		return Order{id, cents}, nil
	})
	pricer := node.TransformFunc[Order, Order](func(_ context.Context, o Order) (Order, error) {
		o.Cents = o.Cents * 120 / 100
		return o, nil
	})
	store := &pipelinetest.Collector[Order]{}

	b := pipeline.New("orders",
		pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	rows := pipeline.Source(b, "read", csvSource)
	orders := pipeline.Transform(b, "parse", rows, parse)
	priced := pipeline.Transform(b, "price", orders, pricer, pipeline.Parallel(8))
	pipeline.Sink(b, "store", priced, store)
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Run(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(store.Items())
	parseCounts, _ := res.Node("parse")
	fmt.Println("dead-lettered at parse:", parseCounts.DeadLettered)
	env := dlq.Envelopes()[0]
	fmt.Println(env.OriginNode, env.Item, errors.Is(env.Err, strconv.ErrSyntax))
	// Output:
	// [{a1 300} {c3 1200}]
	// dead-lettered at parse: 1
	// parse b2,oops true
}
