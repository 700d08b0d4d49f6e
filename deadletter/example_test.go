package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

func ExampleNewMemory() {
	dlq := deadletter.NewMemory(2)
	ctx := context.Background()
	for i := range 3 {
		err := dlq.Write(ctx, deadletter.Envelope{Item: i, Err: errors.New("no stock"), OriginNode: "reserve"})
		if err != nil {
			fmt.Println("write", i, "failed:", err)
		}
	}
	for _, env := range dlq.Envelopes() {
		fmt.Printf("item %v failed at %s: %v\n", env.Item, env.OriginNode, env.Err)
	}
	// Output:
	// write 2 failed: deadletter: sink full
	// item 0 failed at reserve: no stock
	// item 1 failed at reserve: no stock
}

func ExampleOpenFile() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.dlq.jsonl")

	// Write two envelopes: Write returns once its line is on disk.
	dlq, err := deadletter.OpenFile(path)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for id := range 2 {
		env := deadletter.Envelope{
			Item:       map[string]int{"id": id},
			Err:        fmt.Errorf("price service: status 503"),
			Pipeline:   "orders",
			OriginNode: "price",
			Attempts:   4,
		}
		if err := dlq.Write(ctx, env); err != nil {
			panic(err)
		}
	}
	if err := dlq.Close(); err != nil {
		panic(err)
	}

	// Read them back: the item is raw JSON, the error its text.
	for env, err := range deadletter.ReadFile(path) {
		if err != nil {
			fmt.Println("bad line:", err)
			continue
		}
		fmt.Printf("%s: item %s after %d attempts: %v\n", env.OriginNode, env.Item, env.Attempts, env.Err)
	}
	// Output:
	// price: item {"id":0} after 4 attempts: price service: status 503
	// price: item {"id":1} after 4 attempts: price service: status 503
}

// emitter hands items to a function, as a pipeline would hand them to its
// next node.
type emitter[T any] func(ctx context.Context, item T) error

func (e emitter[T]) Emit(ctx context.Context, item T) error { return e(ctx, item) }

func (e emitter[T]) EmitAt(ctx context.Context, item T, _ []byte) error {
	return e(ctx, item)
}

func (e emitter[T]) EmitTracked(ctx context.Context, item T, done func(node.Outcome)) error {
	err := e(ctx, item)
	done(node.Delivered)
	return err
}

func ExampleSource() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// Yesterday's run dead-lettered three orders.
	first, err := deadletter.OpenFile(filepath.Join(dir, "day1.jsonl"))
	if err != nil {
		panic(err)
	}
	for id := 1; id <= 3; id++ {
		if err := first.Write(ctx, deadletter.Envelope{Item: order{ID: id, Total: "9.99"}, ErrText: "status 503", OriginNode: "price"}); err != nil {
			panic(err)
		}
	}
	if err := first.Close(); err != nil {
		panic(err)
	}

	// Re-drive them. In a pipeline, the Source feeds the same nodes and the
	// run's dead-letter sink catches what still fails; here a function
	// stands in for the node, and order 2 still fails.
	again, err := deadletter.OpenFile(filepath.Join(dir, "day2.jsonl"))
	if err != nil {
		panic(err)
	}
	price := func(ctx context.Context, o order) error {
		if o.ID == 2 {
			return again.Write(ctx, deadletter.Envelope{Item: o, ErrText: "invalid currency", OriginNode: "price"})
		}
		fmt.Println("priced order", o.ID)
		return nil
	}
	src := deadletter.Source[order](filepath.Join(dir, "day1.jsonl"))
	if err := src.Run(ctx, emitter[order](price)); err != nil {
		panic(err)
	}
	if err := again.Close(); err != nil {
		panic(err)
	}
	for env, err := range deadletter.ReadFile(filepath.Join(dir, "day2.jsonl")) {
		if err != nil {
			fmt.Println("bad line:", err)
			continue
		}
		fmt.Printf("still failing: %s: %s\n", env.Item, env.ErrText)
	}
	// Output:
	// priced order 1
	// priced order 3
	// still failing: {"id":2,"total":"9.99"}: invalid currency
}
