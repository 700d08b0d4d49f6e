package rabbitmq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// An order is an item derived from a Message. It names the delivery it
// came from, which is how it takes part in the retry topology.
type order struct {
	ID      string
	Retries int
	corr    string
}

func (o order) CorrelationID() string { return o.corr }

// retryPipeline consumes q into a pipeline built by nodes, with the retry
// topology linked to dlq, and runs it until stop says so.
func retryPipeline(t *testing.T, a *admin, q string, dlq deadletter.Sink, nodes func(*pipeline.Builder, pipeline.Stream[rabbitmq.Message], *rabbitmq.Source)) {
	t.Helper()
	ctx := testContext(t)
	a.cleanupTopology(q)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 2, Delay: 50 * time.Millisecond},
	})
	require.NoError(t, err)
	b := pipeline.New("derived", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0 // every failure goes to the broker's layer at once
		}))
	nodes(b, pipeline.Source(b, "consume", src), src)
	p, err := b.Build()
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx)) // declare before publishing
	require.NoError(t, src.Close(ctx))
	a.publish(q, "one", "two")
	_, err = p.Run(ctx)
	require.NoError(t, err)
	for _, name := range []string{q, q + "_retry"} {
		ready, _ := a.depth(name)
		assert.Zero(t, ready, "queue %s", name)
	}
}

// TestRetryTopologyDerivedItem: an item derived from a Message fails in a
// sink with an error a connector already retried (MarkRetried); the
// broker still retries it, found by its correlation id.
func TestRetryTopologyDerivedItem(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	var (
		mu     sync.Mutex
		stored []order
	)
	retryPipeline(t, a, uniqueName(t), deadletter.NewMemory(0), func(b *pipeline.Builder, msgs pipeline.Stream[rabbitmq.Message], src *rabbitmq.Source) {
		orders := pipeline.Transform(b, "parse", msgs, node.TransformFunc[rabbitmq.Message, order](
			func(_ context.Context, m rabbitmq.Message) (order, error) {
				return order{ID: m.MessageID, Retries: m.Retries, corr: m.CorrelationID()}, nil
			}))
		pipeline.Sink(b, "store", orders, node.SinkFunc[order](func(_ context.Context, o order) error {
			if o.Retries == 0 {
				return resilience.MarkRetried(resilience.MarkTransient(errors.New("database busy")), 3)
			}
			mu.Lock()
			defer mu.Unlock()
			if stored = append(stored, o); len(stored) == 2 {
				src.Stop()
			}
			return nil
		}))
	})
	require.Len(t, stored, 2)
	for _, o := range stored {
		assert.Equal(t, 1, o.Retries, "order %s came back once through the retry queue", o.ID)
	}
}

// TestRetryTopologyBatch: a batch of Messages that fails goes back to the
// broker as a whole while its messages have trips left, and to the
// dead-letter sink, acked, once one of them has none.
func TestRetryTopologyBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	dlq := deadletter.NewMemory(10)
	calls := 0
	retryPipeline(t, a, uniqueName(t), dlq, func(b *pipeline.Builder, msgs pipeline.Stream[rabbitmq.Message], src *rabbitmq.Source) {
		batches := pipeline.Batch(b, "batch", msgs, 2, time.Minute)
		pipeline.Sink(b, "store", batches, node.SinkFunc[[]rabbitmq.Message](func(_ context.Context, ms []rabbitmq.Message) error {
			calls++
			if calls == 3 {
				defer src.Stop() // the third failure goes to the dead-letter sink
			}
			return resilience.MarkTransient(errors.New("bulk insert failed"))
		}))
	})
	assert.Equal(t, 3, calls, "1 + MaxRetry deliveries of the batch")
	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	batch := envs[0].Item.([]rabbitmq.Message)
	require.Len(t, batch, 2)
	for _, m := range batch {
		assert.Equal(t, 2, m.Retries)
	}
}
