package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// What docs/rabbitmq.md warns of, shown on the broker: a message that hits
// a quorum queue's x-delivery-limit is dead-lettered through q_dlx into the
// first retry queue, and on its way back to q RabbitMQ sees a dead-letter
// cycle without a rejection in it and drops it. The source never sees it
// again. If a broker stops dropping it, this test fails: update the docs.
func TestBrokerDropsADeliveryLimitCycle(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q)
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q,
		Declare: &rabbitmq.QueueDeclaration{Durable: true, Args: amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(1)}},
		Retry:   rabbitmq.RetryTopology{Enabled: true, MaxRetry: 5, Delay: 50 * time.Millisecond, Durable: true}}
	src, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, "m")
	// A consumer gives the message back until the delivery limit
	// dead-letters it through the topology.
	ch := a.channel()
	for i := 0; i < 2; {
		d, ok, err := ch.Get(q, false)
		require.NoError(t, err)
		if ok {
			require.NoError(t, d.Nack(false, true))
			i++
		}
	}

	src, err = rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		calls int
		hdrs  []amqp.Table
	)
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b := pipeline.New("cycle", pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(10))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			hdrs = append(hdrs, m.Headers)
			if calls == 1 {
				return m, resilience.MarkTransient(errFlaky) // a broker retry
			}
			return m, nil
		}))
	pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
		src.Stop()
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(runCtx)
	mu.Lock()
	defer mu.Unlock()
	if len(hdrs) > 0 {
		t.Logf("first delivery's x-death: %v", hdrs[0]["x-death"])
	}
	assert.ErrorIs(t, err, context.DeadlineExceeded, "nothing came to stop the run")
	assert.Zero(t, calls, "the message never came back")
	ready, _ := a.depth(q)
	retry, _ := a.depth(q + "_retry")
	assert.Zero(t, ready+retry, "and it is nowhere: the broker dropped it")
}
