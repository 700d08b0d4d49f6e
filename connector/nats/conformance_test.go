package nats_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
)

// TestConformance runs the connector conformance suite against NATS
// JetStream: a stream per case, in memory, on the subjects <name>.>, with
// a durable pull consumer of the same name.
func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, conformance{url: servicetest.NATS(t)})
}

// conformanceAckWait is the consumer's AckWait in the suite: how long the
// server waits before it delivers again what a killed process held.
const conformanceAckWait = 5 * time.Second

// A conformance plugs the NATS connector into connectortest. A queue is a
// stream that stores the subjects <queue>.>, and a durable consumer named
// after it, which the source creates; the broker's retry path is the
// consumer's MaxDeliver (MaxRetries + 1) with the source's NakWithDelay.
type conformance struct{ url string }

// childConformance is the harness of the suite's consumer process, which
// has no test to ask servicetest: the server is the one servicetest found
// in the parent, whose environment the process inherits.
func childConformance() conformance {
	u := os.Getenv(servicetest.NATSEnv)
	if u == "" {
		u = servicetest.DefaultNATSURL
	}
	return conformance{url: u}
}

func (h conformance) Addr() string {
	u, _ := url.Parse(h.url)
	return u.Host
}

func (h conformance) config(cfg connectortest.SourceConfig) nats.SourceConfig {
	u, _ := url.Parse(h.url)
	if cfg.Addr != "" {
		u.Host = cfg.Addr
	}
	nc := nats.SourceConfig{
		URL: u.String(), Stream: cfg.Queue, Consumer: cfg.Queue,
		Declare: &nats.StreamDeclaration{Subjects: []string{cfg.Queue + ".>"}, Storage: jetstream.MemoryStorage},
		AckWait: conformanceAckWait, Batch: cfg.Prefetch, PullWait: time.Second, MaxDeliveries: cfg.MaxDeliveries,
		CrashLedger: cfg.CrashLedger,
	}
	if cfg.Retry.Delay > 0 {
		nc.Retry = nats.BrokerRetry{Enabled: true, Delay: cfg.Retry.Delay}
		nc.MaxDeliver = cfg.Retry.MaxRetries + 1
	}
	return nc
}

// js connects the test to the server, for what the suite does beside the
// connector.
func (h conformance) js(t testing.TB) jetstream.JetStream {
	nc, err := natsgo.Connect(h.url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// CreateQueue creates the stream and the consumer by opening a source,
// and deletes the stream, with its consumer, when t ends.
func (h conformance) CreateQueue(t testing.TB, cfg connectortest.SourceConfig) {
	js := h.js(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, cfg.Queue)
	})
	src, err := nats.NewSource(h.config(cfg))
	require.NoError(t, err)
	// A source with the poison guard opens only with a dead-letter sink.
	src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
}

// Publish publishes msgs to <queue>.in, each with its key as Nats-Msg-Id,
// and waits for every PubAck.
func (h conformance) Publish(t testing.TB, queue string, msgs ...connectortest.Message) {
	js := h.js(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var futures []jetstream.PubAckFuture
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(&natsgo.Msg{Subject: queue + ".in", Data: m.Body}, jetstream.WithMsgID(m.Key))
		require.NoError(t, err)
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "publish not acknowledged")
		}
	}
}

// Pending is what the consumer has not yet delivered, and what it
// delivered and is waiting for an ack of (a naked message waiting for its
// delay among them).
func (h conformance) Pending(t testing.TB, queue string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := h.js(t).Consumer(ctx, queue, queue)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return int(info.NumPending) + info.NumAckPending
}

func (h conformance) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[nats.Message], error) {
	src, err := nats.NewSource(h.config(cfg))
	if err != nil {
		return connectortest.Consumer[nats.Message]{}, err
	}
	return connectortest.Consumer[nats.Message]{Source: src, DeadLetter: src.DeadLetter}, nil
}

func (h conformance) NewPublisher(queue string) (node.Sink[connectortest.Message], error) {
	return h.NewPublisherVia(queue, "")
}

// NewPublisherVia is NewPublisher with a publisher that dials addr, the
// fault mode's proxy, instead of the server.
func (h conformance) NewPublisherVia(queue, addr string) (node.Sink[connectortest.Message], error) {
	u := h.url
	if addr != "" {
		p, _ := url.Parse(h.url)
		p.Host = addr
		u = p.String()
	}
	return nats.NewPublisher(nats.PublisherConfig[connectortest.Message]{
		URL: u, Subject: queue + ".in",
		Message: func(m connectortest.Message) (*natsgo.Msg, error) { return &natsgo.Msg{Data: m.Body}, nil },
		MsgID:   func(m connectortest.Message) string { return m.Key },
	})
}

// DeadLinkBound is how soon a source or a publisher gives up a connection
// gone silent: nats.DeadLinkBound, and room for a busy machine. The
// watchdog gives up at most a second past nats.DeadLinkBound, and the
// suite sees it once the node restarts: 15.5 to 16.99 s measured on a
// 2-core machine under -race; 20 s leaves 3 s beyond the slowest.
func (h conformance) DeadLinkBound() time.Duration { return nats.DeadLinkBound + 5*time.Second }

func (h conformance) Message(m nats.Message) connectortest.Message {
	return connectortest.Message{Key: m.MsgID(), Body: m.Data, Delivery: m.Deliveries}
}
