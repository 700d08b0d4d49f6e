package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A good message whose idempotency key is claimed by a consumer that died
// is not poison: each run finds the key busy (ErrInProgress) and fails
// under Fail, but the item ends Failed, not Rejected, so the source does
// not count the run. Six runs, twice MaxDeliveries, leave it in the queue;
// once the dead consumer's lease ends (on the guard's fake clock) it is
// written, once, and acked. Before, the third run dead-lettered it as
// poison and it never reached its sink.
func TestBusyKeyIsNotPoison(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	const maxDeliveries, lease = 3, time.Minute
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: maxDeliveries}
	first, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	first.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	require.NoError(t, first.Open(ctx))
	require.NoError(t, first.Close(ctx))
	a.publish(q, "order-1")

	clock := clockwork.NewFakeClock()
	store := idempotency.NewMemory()
	st, err := store.Claim(ctx, "order-1", "dead consumer", clock.Now(), lease)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)

	var (
		mu      sync.Mutex
		written []string
	)
	dead := deadletter.NewMemory(10)
	run := func() error {
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		sink := node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			written = append(written, m.MessageID)
			src.Stop()
			return nil
		})
		guard := idempotency.Sink(sink, store, func(m rabbitmq.Message) string { return m.MessageID },
			idempotency.WithClock(clock), idempotency.WithLease(lease))
		b := pipeline.New("busy", pipeline.WithDeadLetter(dead), pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.OnItemFailure = resilience.Fail
		}))
		pipeline.Sink(b, "write", pipeline.Source(b, "consume", src), guard)
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		return err
	}
	for i := range 2 * maxDeliveries {
		require.ErrorIs(t, run(), idempotency.ErrInProgress, "run %d: the key is busy", i+1)
		assert.Empty(t, dead.Envelopes(), "run %d: not dead-lettered", i+1)
	}
	clock.Advance(lease)
	require.NoError(t, run(), "the lease ended: the message is written")
	assert.Equal(t, []string{"order-1"}, written, "written once")
	assert.Empty(t, dead.Envelopes(), "never dead-lettered")
	ready, _ := a.depth(q)
	assert.Zero(t, ready, "nothing left in the queue")
}
