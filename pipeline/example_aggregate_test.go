package pipeline_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Aggregate sums each customer's orders in windows of two orders; the last,
// incomplete window of a customer is handed on at the end of input, marked
// Partial.
func ExampleAggregate() {
	type order struct {
		customer string
		cents    int
	}
	b := pipeline.New("totals")
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(
		order{"ann", 100}, order{"bob", 250}, order{"ann", 300}, order{"bob", 50}, order{"ann", 20}))
	totals := pipeline.Aggregate(b, "per-customer", orders, func(o order) string { return o.customer },
		pipeline.CountWindow(2), func() int { return 0 }, func(sum int, o order) int { return sum + o.cents })
	var lines []string
	pipeline.ForEach(b, "print", totals, func(_ context.Context, w pipeline.Window[string, int]) error {
		lines = append(lines, fmt.Sprintf("%s: %d cents in %d orders (partial: %v)", w.Key, w.Value, w.Count, w.Partial))
		return nil
	})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// ann: 20 cents in 1 orders (partial: true)
	// ann: 400 cents in 2 orders (partial: false)
	// bob: 300 cents in 2 orders (partial: false)
}
