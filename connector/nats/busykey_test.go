package nats_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A good message whose idempotency key is claimed by a consumer that died
// is not poison: each run finds the key busy (ErrInProgress) and fails
// under Fail, but the item ends Failed, not Rejected, so the source's
// poison guard spares the delivery. Six runs, twice MaxDeliveries, leave it
// in the stream; once the dead consumer's lease ends (on the guard's fake
// clock) it is written, once, and acked. Before, it was dead-lettered as
// poison after three runs and never reached its sink.
func TestBusyKeyIsNotPoison(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "order-1")
	const maxDeliveries, lease = 3, time.Minute
	cfg := a.config(name)
	cfg.MaxDeliveries = maxDeliveries
	// One message at a time, and a short AckWait: a redelivery the server
	// sends into a pull request the source gave up on comes back soon
	// (docs/nats.md).
	cfg.Batch = 1
	cfg.AckWait = 3 * time.Second
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)

	ctx := testContext(t)
	clock := clockwork.NewFakeClock()
	store := idempotency.NewMemory()
	st, err := store.Claim(ctx, "order-1", "dead consumer", clock.Now(), lease)
	require.NoError(t, err)
	require.Equal(t, idempotency.Claimed, st)

	var (
		mu      sync.Mutex
		written []string
		p       *pipeline.Pipeline
	)
	dead := deadletter.NewMemory(10)
	sink := func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, string(m.Data))
		p.Drain()
		return nil
	}
	guard := idempotency.Sink[nats.Message](node.SinkFunc[nats.Message](sink), store, func(m nats.Message) string { return m.MsgID() },
		idempotency.WithClock(clock), idempotency.WithLease(lease))
	b := pipeline.New("busy", pipeline.WithDeadLetter(dead), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.ItemRetry.MaxRetries = 2
		o.OnItemFailure = resilience.Fail
	}))
	pipeline.Sink(b, "write", pipeline.Source(b, "consume", src), guard)
	p, err = b.Build()
	require.NoError(t, err)

	for i := range 2 * maxDeliveries {
		_, err := p.Run(ctx)
		require.ErrorIs(t, err, idempotency.ErrInProgress, "run %d: the key is busy", i+1)
		assert.Empty(t, dead.Envelopes(), "run %d: not dead-lettered", i+1)
	}
	assert.Zero(t, src.Poisoned())
	clock.Advance(lease)
	_, err = p.Run(ctx)
	require.NoError(t, err, "the lease ended: the message is written")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"order-1"}, written, "written once")
	assert.Empty(t, dead.Envelopes(), "never dead-lettered")
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending, "nothing pending")
	assert.Zero(t, info.NumPending, "nothing left to deliver")
}
