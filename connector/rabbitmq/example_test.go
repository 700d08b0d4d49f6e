package rabbitmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A consumer with the broker's retry topology: failures that item retry
// could not fix wait a minute in orders_retry and come back, up to five
// times; then they go to a dead-letter file. SIGTERM stops it gracefully.
// (It needs a broker, so it is compiled but not run.)
func ExampleNewSource() {
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL:     os.Getenv("AMQP_URL"),
		Queue:   "orders",
		Declare: &rabbitmq.QueueDeclaration{Durable: true},
		Retry:   rabbitmq.RetryTopology{Enabled: true, MaxRetry: 5, Delay: time.Minute, Durable: true},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	dlq, err := deadletter.OpenFile("orders.dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dlq.Close()

	b := pipeline.New("orders",
		pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 2 // short blips in process; long waits at the broker
		}))
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 10 // reconnect when the connection is lost
	}))
	pipeline.Sink(b, "store", msgs, node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
		return upsert(ctx, m.MessageID, m.Body) // idempotent: a message can arrive twice
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() { <-sigs; src.Stop() }()
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
}

// A publisher that waits for each confirm and reports unroutable messages.
func ExampleNewPublisher() {
	type order struct {
		ID     string `json:"id"`
		Region string `json:"region"`
	}
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[order]{
		URL:      os.Getenv("AMQP_URL"),
		Exchange: "orders",
		Route:    func(o order) string { return o.Region },
		Publishing: func(o order) (amqp.Publishing, error) {
			body, err := json.Marshal(o)
			return amqp.Publishing{MessageId: o.ID, Body: body, ContentType: "application/json", DeliveryMode: amqp.Persistent}, err
		},
		Mandatory: true,
		Confirms:  rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: 10 * time.Second},
		PubRetry:  rabbitmq.PubRetry{Enabled: true},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b := pipeline.New("export")
	orders := pipeline.Source(b, "orders", node.SourceFunc[order](func(ctx context.Context, out node.Emitter[order]) error {
		return out.Emit(ctx, order{ID: "o-1", Region: "eu"})
	}))
	pipeline.Sink(b, "publish", orders, pub, pipeline.Parallel(16))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
}

func upsert(context.Context, string, []byte) error { return nil }
