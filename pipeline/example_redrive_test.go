package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

type Payment struct {
	ID       int    `json:"id"`
	Currency string `json:"currency"`
}

// runPayments runs src through a pricing step that fails on what rejects,
// dead-lettering failures to the file at dlqPath, and returns what was
// stored.
func runPayments(src node.Source[Payment], dlqPath string, rejects func(Payment) error) ([]Payment, error) {
	dlq, err := deadletter.OpenFile(dlqPath)
	if err != nil {
		return nil, err
	}
	b := pipeline.New("payments", pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	price := node.TransformFunc[Payment, Payment](func(_ context.Context, p Payment) (Payment, error) {
		return p, rejects(p)
	})
	store := &pipelinetest.Collector[Payment]{}
	pipeline.Sink(b, "store", pipeline.Transform(b, "price", pipeline.Source(b, "read", src), price), store)
	p, err := b.Build()
	if err != nil {
		return nil, err
	}
	_, runErr := p.Run(context.Background())
	return store.Items(), errors.Join(runErr, dlq.Close())
}

// A re-drive run feeds yesterday's dead letters back into the same nodes;
// what still fails is dead-lettered again, to a new file.
func Example_redrive() {
	dir, _ := os.MkdirTemp("", "sluice-redrive")
	defer os.RemoveAll(dir)
	day1, day2 := filepath.Join(dir, "day1.jsonl"), filepath.Join(dir, "day2.jsonl")

	// Day 1: the currency service rejects everything but EUR.
	payments := pipelinetest.NewSliceSource(Payment{1, "EUR"}, Payment{2, "USD"}, Payment{3, "XXX"})
	stored, err := runPayments(payments, day1, func(p Payment) error {
		if p.Currency != "EUR" {
			return resilience.MarkPermanent(fmt.Errorf("currency %s not supported", p.Currency))
		}
		return nil
	})
	fmt.Println("day 1 stored", stored, err)

	// Day 2: USD is supported now. Re-drive day 1's dead letters.
	stored, err = runPayments(deadletter.Source[Payment](day1), day2, func(p Payment) error {
		if p.Currency == "XXX" {
			return resilience.MarkPermanent(errors.New("currency XXX does not exist"))
		}
		return nil
	})
	fmt.Println("day 2 stored", stored, err)
	for env, err := range deadletter.ReadFile(day2) {
		fmt.Printf("still dead: %s at %s: %s %v\n", env.Item, env.OriginNode, env.ErrText, err)
	}
	// Output:
	// day 1 stored [{1 EUR}] <nil>
	// day 2 stored [{2 USD}] <nil>
	// still dead: {"id":3,"currency":"XXX"} at price: currency XXX does not exist <nil>
}
