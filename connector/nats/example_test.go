package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A consumer with the server's redelivery: failures that item retry could
// not fix come back after 1 s, 10 s, then every minute, up to five
// deliveries in all; then they go to a dead-letter file. SIGTERM stops it
// gracefully. (It needs a server, so it is compiled but not run.)
func ExampleNewSource() {
	src, err := nats.NewSource(nats.SourceConfig{
		URL:        os.Getenv("NATS_URL"),
		Stream:     "ORDERS",
		Consumer:   "store",
		Declare:    &nats.StreamDeclaration{Subjects: []string{"orders.>"}},
		MaxDeliver: 5,
		BackOff:    []time.Duration{time.Second, 10 * time.Second, time.Minute},
		Retry:      nats.BrokerRetry{Enabled: true, HandOffAfter: 5 * time.Second},
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
			o.ItemRetry.MaxRetries = 2 // short blips in process; long waits in the server
		}))
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 10 // reconnect when the connection is lost
	}))
	pipeline.Sink(b, "store", msgs, node.SinkFunc[nats.Message](func(ctx context.Context, m nats.Message) error {
		return upsert(ctx, m.CorrelationID(), m.Data) // idempotent: a message can arrive twice
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

// A publisher that waits for each PubAck, with the order's id as
// Nats-Msg-Id: an order published twice within the stream's duplicate
// window is stored once.
func ExampleNewPublisher() {
	type order struct {
		ID     string `json:"id"`
		Region string `json:"region"`
	}
	pub, err := nats.NewPublisher(nats.PublisherConfig[order]{
		URL:   os.Getenv("NATS_URL"),
		Route: func(o order) string { return "orders." + o.Region },
		Message: func(o order) (*natsgo.Msg, error) {
			data, err := json.Marshal(o)
			return &natsgo.Msg{Data: data}, err
		},
		MsgID:    func(o order) string { return o.ID },
		PubRetry: nats.PubRetry{Enabled: true},
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
