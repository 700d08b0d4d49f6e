package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/redisstore"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Consumers on several machines share their completed keys in Redis, so
// that a payment any of them charged is not charged again by another. (It
// needs a Redis server, so it is compiled but not run.)
func Example() {
	type payment struct {
		ID     string // set by the producer: the same in every delivery
		Amount int
	}
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	store, err := redisstore.New(client,
		redisstore.WithPrefix("payments:idem:"),   // the keys of this job
		redisstore.WithRetention(30*24*time.Hour)) // duplicates arrive within a month
	if err != nil {
		fmt.Println(err)
		return
	}
	charge := node.SinkFunc[payment](func(_ context.Context, p payment) error {
		fmt.Println("charged", p.ID, p.Amount)
		return nil
	})
	guarded := idempotency.Sink(charge, store, func(p payment) string { return p.ID },
		idempotency.WithName("charge"))

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
}

// New does not touch the server, so it runs without one: it checks its
// arguments and reports every problem at once.
func ExampleNew() {
	_, err := redisstore.New(nil, redisstore.WithRetention(time.Microsecond))
	fmt.Println(err)

	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // connects on first use
	defer client.Close()
	store, err := redisstore.New(client)
	fmt.Println(store.Prefix(), err)
	// Output:
	// redisstore: WithRetention(1µs): must be at least 1ms
	// redisstore: client is nil
	// sluice:idem: <nil>
}
