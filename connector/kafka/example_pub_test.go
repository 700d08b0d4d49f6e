package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A Publisher produces each item, keyed by customer; Keyed on the sink
// keeps each customer's records in order.
func ExamplePublisher() {
	type order struct{ ID, Customer string }
	pub, err := kafka.NewPublisher(kafka.PublisherConfig[order]{
		Brokers:  []string{"127.0.0.1:9092"},
		Topic:    "orders",
		PubRetry: kafka.PubRetry{Enabled: true},
		Record: func(o order) (*kgo.Record, error) {
			return &kgo.Record{Key: []byte(o.Customer), Value: []byte(o.ID)}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	b := pipeline.New("publish")
	orders := pipeline.Source(b, "orders", pipelinetest.NewSliceSource(order{"1", "ada"}, order{"2", "bob"}))
	pipeline.Sink(b, "publish", orders, pub, pipeline.Keyed(8, func(o order) string { return o.Customer }))
	p, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// An ExactlyOnce pipeline consumes orders and produces one output per
// order; the outputs and the orders' offsets commit in one transaction.
func ExampleNewExactlyOnce() {
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{
		Brokers:         []string{"127.0.0.1:9092"},
		Topic:           "orders",
		Group:           "pricing",
		TransactionalID: "pricing-1",
		Output:          "priced",
		Record: func(m kafka.Message) (*kgo.Record, error) {
			return &kgo.Record{Key: m.Key, Value: append([]byte("priced "), m.Value...)}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	b := pipeline.New("pricing")
	msgs := pipeline.Source(b, "orders", eo.Source())
	pipeline.Sink(b, "priced", msgs, eo.Sink(), pipeline.Parallel(8))
	p, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pipeline.RunUntilSignal(context.Background(), p); err != nil {
		log.Fatal(err)
	}
}

// Validate names every setting it refuses.
func ExamplePublisherConfig_Validate() {
	err := kafka.PublisherConfig[string]{Brokers: []string{"localhost"}, AckTimeout: -time.Second}.Validate()
	fmt.Println(err)
	// Output:
	// kafka: Record = nil: required: it turns an item into a record
	// kafka: Brokers[0] = "localhost": must be host:port
	// kafka: AckTimeout = -1s: must not be negative
}
