package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// assertUnknown checks that err says the publish may have reached the
// broker, for the pipeline (not the message's fault, worth a retry) and
// for an idempotency guard (keep the claim).
func assertUnknown(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown)
	assert.ErrorIs(t, err, idempotency.ErrUnknownOutcome)
	assert.True(t, resilience.IsBlameless(err), "not the message's fault: %v", err)
	assert.True(t, resilience.IsTransient(err), "worth a retry: %v", err)
}

// A Write after Close is refused, permanently, without dialling: a
// connection dialled then would be closed by nothing. Open starts
// publishing again.
func TestPublishAfterCloseRefused(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Confirms: waitConfirms,
		PubRetry: rabbitmq.PubRetry{Enabled: true}})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Close(ctx))

	err := pub.Write(ctx, "after-close")
	require.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.False(t, resilience.IsTransient(err))
	assert.Equal(t, 1, px.connections(), "no connection dialled after Close")
	ready, _ := a.depth(q)
	assert.Zero(t, ready)

	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "after-open"))
	ready, _ = a.depth(q)
	assert.Equal(t, 1, ready)
}

// Close while a Write waits for its confirm, under PubRetry: the Write
// does not dial again to publish a second copy; it ends with its outcome
// unknown (the broker may have taken the message before the close).
func TestPublishCloseDuringConfirmWait(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: waitConfirms, CloseTimeout: 100 * time.Millisecond,
		PubRetry: rabbitmq.PubRetry{Enabled: true, MaxRetry: 3, Delay: time.Second}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	done := make(chan error, 1)
	go func() { done <- pub.Write(ctx, "m1") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // sent; its confirm's wait
	_ = pub.Close(ctx)                                  // the close-ok is held back: CloseTimeout
	px.resume()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the Write still waits after Close")
	}
	require.Error(t, err)
	assertUnknown(t, err)
	assert.ErrorIs(t, err, rabbitmq.ErrNotOpen)
	assert.Equal(t, 1, px.connections(), "no connection dialled after Close")
}

// A message the broker refuses by closing the channel (an invalid
// expiration: 406) ends every publish waiting on that channel with its
// reason; the others are not the refused one: their error is transient,
// and a retry of theirs goes through, while the refused one is refused
// again.
func TestPublishNeighbourRefusalLeavesOthersRetryable(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: waitConfirms,
		Publishing: func(s string) (amqp.Publishing, error) {
			m := amqp.Publishing{Body: []byte(s)}
			if s == "bad" {
				m.Expiration = "not-a-number"
			}
			return m, nil
		}})
	require.NoError(t, pub.Open(ctx))
	px.pause()
	bad, good := make(chan error, 1), make(chan error, 1)
	go func() { bad <- pub.Write(ctx, "bad") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	go func() { good <- pub.Write(ctx, "good") }()
	require.NoError(t, clock.BlockUntilContext(ctx, 2))
	px.resume()
	for _, c := range []chan error{bad, good} {
		select {
		case err := <-c:
			require.Error(t, err)
			assertAMQPCode(t, err, amqp.PreconditionFailed)
			assert.True(t, resilience.IsTransient(err), "%v", err)
			assert.False(t, resilience.IsBlameless(err), "the broker refused one of them: %v", err)
			assert.ErrorIs(t, err, rabbitmq.ErrOutcomeUnknown)
		case <-ctx.Done():
			t.Fatal("a Write still waits after the channel closed")
		}
	}
	require.NoError(t, pub.Write(ctx, "good"), "the neighbour's retry")
	err := pub.Write(ctx, "bad")
	assertAMQPCode(t, err, amqp.PreconditionFailed)
	ready, _ := a.depth(q)
	assert.Equal(t, 1, ready)
}

// A broker that is away is not the message's fault: the error is
// blameless, with the publisher's retry and without.
func TestPublishBrokerDownIsBlameless(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	a := newAdmin(t)
	for _, retry := range []bool{false, true} {
		px := newProxy(t, a.url)
		pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: "q", Confirms: waitConfirms,
			DialTimeout: time.Second, PubRetry: rabbitmq.PubRetry{Enabled: retry, MaxRetry: 2, Delay: time.Millisecond}})
		px.Close()
		err := pub.Write(ctx, "m1")
		require.Error(t, err)
		assert.True(t, resilience.IsBlameless(err), "PubRetry %v: %v", retry, err)
		assert.NotErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "never sent: %v", err)
	}
}

// A nack (a full queue that rejects publishes) is the queue's state, not
// the message's fault: transient and blameless.
func TestPublishNackIsBlameless(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, RoutingKey: q, Confirms: waitConfirms})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "m1"))
	err := pub.Write(ctx, "m2")
	require.ErrorIs(t, err, rabbitmq.ErrNacked)
	assert.True(t, resilience.IsTransient(err))
	assert.True(t, resilience.IsBlameless(err))
	assert.NotErrorIs(t, err, rabbitmq.ErrOutcomeUnknown, "the broker said no")
}
