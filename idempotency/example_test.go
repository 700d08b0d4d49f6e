package idempotency_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A payment is charged once, though its message arrives twice.
func Example() {
	type payment struct {
		ID     string // set by the producer: the same in every delivery
		Amount int
	}
	charge := node.SinkFunc[payment](func(_ context.Context, p payment) error {
		fmt.Println("charged", p.ID, p.Amount)
		return nil
	})
	guarded := idempotency.Sink(charge, idempotency.NewMemory(),
		func(p payment) string { return p.ID }, idempotency.WithName("charge"))

	b := pipeline.New("payments")
	payments := pipeline.Source(b, "read", pipelinetest.NewSliceSource(
		payment{"pay-1", 10}, payment{"pay-2", 25}, payment{"pay-1", 10})) // pay-1 redelivered
	pipeline.Sink(b, "charge", payments, guarded)
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	s := guarded.Stats()
	fmt.Println("written", s.Written, "duplicates", s.Duplicates)
	// Output:
	// charged pay-1 10
	// charged pay-2 25
	// written 2 duplicates 1
}

// A store's answers, as two consumers see them: the second finds the key
// busy while the first holds a live claim, and takes it over once the
// claim's lease ran out, as after a crash of the first.
func ExampleStore() {
	ctx := context.Background()
	store := idempotency.NewMemory()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lease := 30 * time.Second

	st, _ := store.Claim(ctx, "pay-1", "consumer-a", now, lease)
	fmt.Println("a claims:", st)
	st, _ = store.Claim(ctx, "pay-1", "consumer-b", now.Add(time.Second), lease)
	fmt.Println("b claims:", st)
	st, _ = store.Claim(ctx, "pay-1", "consumer-b", now.Add(lease), lease)
	fmt.Println("b claims after the lease:", st)
	fmt.Println("a completes:", store.Complete(ctx, "pay-1", "consumer-a", now.Add(lease)))
	fmt.Println("b completes:", store.Complete(ctx, "pay-1", "consumer-b", now.Add(lease)))
	st, _ = store.Claim(ctx, "pay-1", "consumer-c", now.Add(time.Hour), lease)
	fmt.Println("c claims:", st)
	// Output:
	// a claims: claimed
	// b claims: busy
	// b claims after the lease: claimed
	// a completes: idempotency: claim lost: the owner no longer holds it
	// b completes: <nil>
	// c claims: completed
}
