package connectortest_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// rabbit is the sound connector that the suite's own tests break: the
// RabbitMQ connector, plugged in as connector/rabbitmq's conformance test
// does it (that file's harness is the documented one; this one is as
// small as the suite's tests need).
type rabbit struct {
	url string
	// source, when set, changes each source's config before it is built.
	source func(*rabbitmq.SourceConfig)

	mu      sync.Mutex
	configs map[string]connectortest.SourceConfig
}

func newRabbit(url string) *rabbit {
	return &rabbit{url: url, configs: map[string]connectortest.SourceConfig{}}
}

// DeadLinkBound is the RabbitMQ harness's bound (connector/rabbitmq's
// conformance test): its 10 s heartbeat gives a silent connection up 15 s
// after the broker's last frame; the rest is room for a busy machine.
func (h *rabbit) DeadLinkBound() time.Duration { return 25 * time.Second }

func (h *rabbit) Addr() string {
	u, _ := url.Parse(h.url)
	return u.Host
}

func (h *rabbit) config(cfg connectortest.SourceConfig) rabbitmq.SourceConfig {
	u, _ := url.Parse(h.url)
	if cfg.Addr != "" {
		u.Host = cfg.Addr
	}
	rc := rabbitmq.SourceConfig{URL: u.String(), Queue: cfg.Queue, Prefetch: cfg.Prefetch, MaxDeliveries: cfg.MaxDeliveries,
		CrashLedger: cfg.CrashLedger, Declare: &rabbitmq.QueueDeclaration{}}
	if cfg.Retry.Delay > 0 {
		rc.Retry = rabbitmq.RetryTopology{Enabled: true, Delay: cfg.Retry.Delay, MaxRetry: cfg.Retry.MaxRetries}
	}
	if h.source != nil {
		h.source(&rc)
	}
	return rc
}

func (h *rabbit) channel(t testing.TB) *amqp.Channel {
	conn, err := amqp.Dial(h.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

func (h *rabbit) CreateQueue(t testing.TB, cfg connectortest.SourceConfig) {
	rc := h.config(cfg)
	h.mu.Lock()
	h.configs[cfg.Queue] = cfg
	h.mu.Unlock()
	ch := h.channel(t)
	t.Cleanup(func() {
		for _, q := range append([]string{cfg.Queue}, rc.Retry.RetryQueues(cfg.Queue)...) {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(cfg.Queue+"_dlx", false, false)
		_ = ch.ExchangeDelete(cfg.Queue+"_retry", false, false)
	})
	src, err := rabbitmq.NewSource(rc)
	require.NoError(t, err)
	src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
}

func (h *rabbit) Publish(t testing.TB, queue string, msgs ...connectortest.Message) {
	ch := h.channel(t)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{Body: m.Body, MessageId: m.Key})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

func (h *rabbit) Pending(t testing.TB, queue string) int {
	h.mu.Lock()
	cfg := h.configs[queue]
	h.mu.Unlock()
	qs := []string{queue}
	if cfg.Retry.Delay > 0 {
		qs = append(qs, h.config(cfg).Retry.RetryQueues(queue)...)
	}
	n := 0
	ch := h.channel(t)
	for _, q := range qs {
		info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		require.NoError(t, err)
		n += info.Messages
	}
	return n
}

func (h *rabbit) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[rabbitmq.Message], error) {
	src, err := rabbitmq.NewSource(h.config(cfg))
	if err != nil {
		return connectortest.Consumer[rabbitmq.Message]{}, err
	}
	return connectortest.Consumer[rabbitmq.Message]{Source: src, DeadLetter: src.DeadLetter}, nil
}

func (h *rabbit) NewPublisher(queue string) (node.Sink[connectortest.Message], error) {
	return rabbitmq.NewPublisher(rabbitmq.PublisherConfig[connectortest.Message]{
		URL: h.url, RoutingKey: queue, Mandatory: true,
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true},
		Publishing: func(m connectortest.Message) (amqp.Publishing, error) {
			return amqp.Publishing{Body: m.Body, MessageId: m.Key}, nil
		},
	})
}

func (h *rabbit) Message(m rabbitmq.Message) connectortest.Message {
	return connectortest.Message{Key: m.MessageID, Body: m.Body, Delivery: m.Retries + 1}
}
