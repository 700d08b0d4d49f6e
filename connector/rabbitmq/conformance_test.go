package rabbitmq_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
)

// TestConformance runs the connector conformance suite against RabbitMQ:
// a queue per case, with the retry topology when the case asks for the
// broker's retry path.
func TestConformance(t *testing.T) {
	t.Parallel()
	connectortest.Run(t, newHarness(servicetest.RabbitMQ(t)))
}

// A harness plugs the RabbitMQ connector into connectortest: a queue is a
// classic queue, declared by the source, with its retry topology when the
// case asks for the broker's retry path.
type harness struct {
	url string

	mu      sync.Mutex
	configs map[string]connectortest.SourceConfig // by queue, as created
}

func newHarness(url string) *harness {
	return &harness{url: url, configs: map[string]connectortest.SourceConfig{}}
}

// childHarness is the harness of the suite's consumer process, which has
// no test to ask servicetest: the broker is the one servicetest found in
// the parent, whose environment the process inherits.
func childHarness() *harness {
	u := os.Getenv(servicetest.RabbitMQEnv)
	if u == "" {
		u = servicetest.DefaultRabbitMQURL
	}
	return newHarness(u)
}

func (h *harness) Addr() string {
	u, _ := url.Parse(h.url)
	return u.Host
}

// config returns the source's config for cfg.
func (h *harness) config(cfg connectortest.SourceConfig) rabbitmq.SourceConfig {
	u := h.url
	if cfg.Addr != "" {
		p, _ := url.Parse(h.url)
		p.Host = cfg.Addr
		u = p.String()
	}
	rc := rabbitmq.SourceConfig{URL: u, Queue: cfg.Queue, Prefetch: cfg.Prefetch, MaxDeliveries: cfg.MaxDeliveries, CrashLedger: cfg.CrashLedger,
		Declare: &rabbitmq.QueueDeclaration{}}
	if cfg.Retry.Delay > 0 {
		rc.Retry = rabbitmq.RetryTopology{Enabled: true, Delay: cfg.Retry.Delay, MaxRetry: cfg.Retry.MaxRetries}
	}
	return rc
}

// CreateQueue declares the queue and its topology by opening a source,
// and deletes them when t ends.
func (h *harness) CreateQueue(t testing.TB, cfg connectortest.SourceConfig) {
	t.Helper()
	rc := h.config(cfg)
	h.mu.Lock()
	h.configs[cfg.Queue] = cfg
	h.mu.Unlock()
	t.Cleanup(func() {
		conn, err := amqp.Dial(h.url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range append([]string{cfg.Queue}, rc.Retry.RetryQueues(cfg.Queue)...) {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, ex := range []string{cfg.Queue + "_dlx", cfg.Queue + "_retry"} {
			_ = ch.ExchangeDelete(ex, false, false)
		}
	})
	src, err := rabbitmq.NewSource(rc)
	require.NoError(t, err)
	// A source with the poison guard opens only with a dead-letter sink.
	src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
}

// Publish sends msgs to the queue through the default exchange, with
// confirms, and waits until the broker has them all.
func (h *harness) Publish(t testing.TB, queue string, msgs ...connectortest.Message) {
	t.Helper()
	conn, err := amqp.Dial(h.url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var dcs []*amqp.DeferredConfirmation
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{Body: m.Body, MessageId: m.Key})
		require.NoError(t, err)
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "publish nacked")
	}
}

// Pending counts the ready messages of the queue and of its retry queue,
// with passive declares. The suite calls it when no source runs, so the
// queue must have no consumer left either: every source that ran
// cancelled its consumer when it closed, or its connection is gone.
func (h *harness) Pending(t testing.TB, queue string) int {
	t.Helper()
	h.mu.Lock()
	cfg := h.configs[queue]
	h.mu.Unlock()
	conn, err := amqp.Dial(h.url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	info, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	assert.Zero(t, info.Consumers, "queue %s has no consumer left", queue)
	n := info.Messages
	if cfg.Retry.Delay == 0 {
		return n
	}
	for _, q := range h.config(cfg).Retry.RetryQueues(queue) {
		info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		require.NoError(t, err)
		n += info.Messages
	}
	return n
}

func (h *harness) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[rabbitmq.Message], error) {
	src, err := rabbitmq.NewSource(h.config(cfg))
	if err != nil {
		return connectortest.Consumer[rabbitmq.Message]{}, err
	}
	return connectortest.Consumer[rabbitmq.Message]{Source: src, DeadLetter: src.DeadLetter}, nil
}

func (h *harness) NewPublisher(queue string) (node.Sink[connectortest.Message], error) {
	return h.NewPublisherVia(queue, "")
}

// NewPublisherVia is NewPublisher with a publisher that dials addr, the
// fault mode's proxy, instead of the broker.
func (h *harness) NewPublisherVia(queue, addr string) (node.Sink[connectortest.Message], error) {
	u := h.url
	if addr != "" {
		p, _ := url.Parse(h.url)
		p.Host = addr
		u = p.String()
	}
	return rabbitmq.NewPublisher(rabbitmq.PublisherConfig[connectortest.Message]{
		URL: u, RoutingKey: queue, Mandatory: true,
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true},
		Publishing: func(m connectortest.Message) (amqp.Publishing, error) {
			if len(m.Key) > 255 {
				return amqp.Publishing{}, errors.New("a message id is at most 255 bytes")
			}
			return amqp.Publishing{Body: m.Body, MessageId: m.Key}, nil
		},
	})
}

// DeadLinkBound is how soon a source or a publisher gives up a connection
// gone silent: the client negotiates a 10 s heartbeat and gives the
// connection up 15 s (three half-intervals) after the broker's last frame;
// the rest is room for a busy machine.
func (h *harness) DeadLinkBound() time.Duration { return 25 * time.Second }

// Message counts a delivery by the trips through the retry topology: the
// broker's own redelivery flag does not say how often.
func (h *harness) Message(m rabbitmq.Message) connectortest.Message {
	return connectortest.Message{Key: m.MessageID, Body: m.Body, Delivery: m.Retries + 1}
}
