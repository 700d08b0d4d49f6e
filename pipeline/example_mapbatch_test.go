package pipeline_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// MapBatch prices SKUs with one bulk call per slice of three; the unknown
// SKU fails alone and is dead-lettered alone, while the rest of its slice
// is delivered, in order.
func ExampleMapBatch() {
	prices := map[string]int{"apple": 3, "pear": 4, "plum": 2, "fig": 7}
	bulkCalls := 0
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("prices", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
	}))
	skus := pipeline.Source(b, "read", pipelinetest.NewSliceSource("apple", "kiwi", "pear", "plum", "fig"))
	priced := pipeline.MapBatch(b, "price", skus, 3, 0, func(_ context.Context, ids []string) ([]string, []error) {
		bulkCalls++ // one request for the whole slice
		out, errs := make([]string, len(ids)), make([]error, len(ids))
		for i, id := range ids {
			if p, ok := prices[id]; ok {
				out[i] = fmt.Sprintf("%s=%d", id, p)
			} else {
				errs[i] = errors.New("unknown SKU")
			}
		}
		return out, errs
	})
	pipeline.ForEach(b, "print", priced, func(_ context.Context, s string) error {
		fmt.Println(s)
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
	for _, e := range dlq.Envelopes() {
		fmt.Println("dead letter:", e.Item, e.Err)
	}
	fmt.Println("bulk calls:", bulkCalls)
	// Output:
	// apple=3
	// pear=4
	// plum=2
	// fig=7
	// dead letter: kiwi unknown SKU
	// bulk calls: 2
}
