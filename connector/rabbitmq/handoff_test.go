package rabbitmq_test

import (
	"context"
	"errors"
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

// seenDelivery is one delivery of a message as a node saw it.
type seenDelivery struct {
	at       time.Time
	exchange string
	headers  amqp.Table
}

// An item retry that would wait at least HandOffAfter goes to the tier of
// the shortest delay not shorter than the wait; the next delivery goes on
// with the retries where they were, and hand-offs are not trips through
// the topology.
func TestHandOffThroughTiers(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q, "100ms", "300ms")
	cfg := rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 2,
			Delays: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}, HandOffAfter: 50 * time.Millisecond},
	}
	src, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, "m")

	var (
		mu   sync.Mutex
		seen []seenDelivery
	)
	// Call 1 fails asking for no wait (in process); call 2 asks for 200ms
	// (handed off to the 300ms tier); call 3, the next delivery's, asks for
	// 80ms (the 100ms tier); call 4 works.
	script := []time.Duration{0, 200 * time.Millisecond, 80 * time.Millisecond}
	handle := node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, seenDelivery{at: time.Now(), exchange: m.Exchange, headers: m.Headers})
		if n := len(seen); n <= len(script) {
			return m, resilience.RetryAfter(errFlaky, script[n-1])
		}
		return m, nil
	})
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("handoff", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 5
		}))
	var stored int
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src), handle)
	pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
		stored++
		src.Stop()
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(ctx)
	require.NoError(t, err)

	assert.Equal(t, 1, stored)
	assert.Empty(t, dlq.Envelopes())
	require.Len(t, seen, 4)
	handled, ok := res.Node("handle")
	require.True(t, ok)
	assert.Equal(t, int64(2), handled.HandedOff)
	assert.Equal(t, int64(3), handled.ItemRetries)
	assert.Equal(t, q+"_retry", seen[2].exchange, "the third call is a new delivery, through the topology")
	assert.Equal(t, int64(2), seen[2].headers[rabbitmq.HeaderHandOffRetry], "it goes on with retry 2")
	assert.Equal(t, "handle", seen[2].headers[rabbitmq.HeaderHandOffNode])
	assert.Equal(t, int64(2), seen[2].headers[rabbitmq.HeaderAttempts], "the calls so far travel with it")
	assert.Equal(t, int64(0), seen[2].headers[rabbitmq.HeaderRetries], "a hand-off is not a trip")
	assert.Equal(t, int64(3), seen[3].headers[rabbitmq.HeaderHandOffRetry])
	assert.Equal(t, int64(3), seen[3].headers[rabbitmq.HeaderAttempts])
	assert.GreaterOrEqual(t, seen[2].at.Sub(seen[1].at), 300*time.Millisecond, "held by the 300ms tier")
	assert.GreaterOrEqual(t, seen[3].at.Sub(seen[2].at), 100*time.Millisecond, "held by the 100ms tier")
	ready, _ := a.depth(q)
	assert.Zero(t, ready)
}

// The broker's retries take the tiers in turn, the last one for every
// trip past them; the tiers read back with their TTLs (a declaration with
// other arguments is refused).
func TestRetryTiersByTrip(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q, "100ms", "300ms")
	tiers := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delays: tiers},
	})
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))

	for i, name := range []string{q + "_retry_100ms", q + "_retry_300ms"} {
		_, err := a.channel().QueueDeclare(name, false, false, false, false, amqp.Table{
			"x-message-ttl": tiers[i].Milliseconds(), "x-dead-letter-exchange": q + "_retry", "x-queue-type": "classic"})
		require.NoError(t, err, "tier %s is declared as expected", name)
		_, err = a.channel().QueueDeclare(name, false, false, false, false, amqp.Table{
			"x-message-ttl": tiers[i].Milliseconds() + 1, "x-dead-letter-exchange": q + "_retry", "x-queue-type": "classic"})
		var aerr *amqp.Error
		require.ErrorAs(t, err, &aerr, "another TTL is refused")
		assert.Equal(t, amqp.PreconditionFailed, aerr.Code)
	}

	a.publish(q, "m")
	var (
		mu    sync.Mutex
		times []time.Time
	)
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("tiers", pipeline.WithDeadLetter(src.DeadLetter(deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		defer src.Stop()
		return dlq.Write(ctx, env)
	}))), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.MaxRetries = 0
	}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			return m, resilience.MarkTransient(errFlaky)
		}))
	pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.NoError(t, err)
	require.Len(t, times, 4, "MaxRetry 3: four deliveries")
	for i, want := range []time.Duration{tiers[0], tiers[1], tiers[1]} {
		assert.GreaterOrEqual(t, times[i+1].Sub(times[i]), want, "trip %d", i+1)
	}
	require.Len(t, dlq.Envelopes(), 1)
	assert.Equal(t, 4, dlq.Envelopes()[0].Attempts)
}

// With Declare nil, Open checks the existing queue: one without the
// topology's dead-letter exchange is refused (rejected messages would be
// dropped), and an existing quorum queue gets quorum retry queues.
func TestOpenChecksAnExistingQueue(t *testing.T) {
	t.Parallel()
	t.Run("no dead-letter exchange", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		q := uniqueName(t)
		a.cleanupTopology(q)
		a.declareQueue(q, nil)
		src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q,
			Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second}})
		require.NoError(t, err)
		err = src.Open(testContext(t))
		var ce *rabbitmq.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "Retry.Enabled", ce.Field, "%v", err)
		assert.Contains(t, err.Error(), "x-dead-letter-exchange")
		assert.False(t, resilience.IsTransient(err), "node retry does not try again")
		_, err = a.channel().QueueDeclarePassive(q+"_retry", false, false, false, false, nil)
		assert.Error(t, err, "nothing of the topology is declared")
	})
	t.Run("classic with the exchange", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		for _, durable := range []bool{true, false} {
			q := uniqueName(t)
			a.cleanupTopology(q)
			_, err := a.channel().QueueDeclare(q, durable, false, false, false, amqp.Table{"x-dead-letter-exchange": q + "_dlx"})
			require.NoError(t, err)
			src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q,
				Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second}})
			require.NoError(t, err)
			ctx := testContext(t)
			require.NoError(t, src.Open(ctx), "durable %v", durable)
			require.NoError(t, src.Close(ctx))
			_, err = a.channel().QueueDeclare(q+"_retry", false, false, false, false, amqp.Table{
				"x-message-ttl": int64(1000), "x-dead-letter-exchange": q + "_retry", "x-queue-type": "classic"})
			require.NoError(t, err, "the retry queue is a classic queue")
		}
	})
	t.Run("quorum", func(t *testing.T) {
		t.Parallel()
		a := newAdmin(t)
		q := uniqueName(t)
		a.cleanupTopology(q)
		_, err := a.channel().QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": q + "_dlx"})
		require.NoError(t, err)
		cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q,
			Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second, Durable: true}}
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		ctx := testContext(t)
		require.NoError(t, src.Open(ctx))
		require.NoError(t, src.Close(ctx))
		_, err = a.channel().QueueDeclare(q+"_retry", true, false, false, false, amqp.Table{
			"x-message-ttl": int64(1000), "x-dead-letter-exchange": q + "_retry", "x-queue-type": "quorum"})
		require.NoError(t, err, "the retry queue is a quorum queue")

		cfg.Retry.Durable = false
		src, err = rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		err = src.Open(ctx)
		var ce *rabbitmq.ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "Retry.Durable", ce.Field)
	})
}

func TestTierConfigErrors(t *testing.T) {
	t.Parallel()
	for field, r := range map[string]rabbitmq.RetryTopology{
		"Retry.Delay":        {Enabled: true, MaxRetry: 1, Delay: time.Second, Delays: []time.Duration{time.Second}},
		"Retry.Delays[1]":    {Enabled: true, MaxRetry: 1, Delays: []time.Duration{time.Second, time.Second}},
		"Retry.Delays[0]":    {Enabled: true, MaxRetry: 1, Delays: []time.Duration{time.Microsecond}},
		"Retry.HandOffAfter": {Enabled: true, MaxRetry: 1, Delay: time.Second, HandOffAfter: -1},
	} {
		_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q", Retry: r})
		var ce *rabbitmq.ConfigError
		require.ErrorAs(t, err, &ce, field)
		assert.Equal(t, field, ce.Field)
	}
	_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q", MaxDeliveries: -1})
	assert.ErrorContains(t, err, "MaxDeliveries")
	assert.False(t, errors.Is(err, rabbitmq.ErrPoison))
}
