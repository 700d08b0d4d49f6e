package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func textPublishing(s string) (amqp.Publishing, error) {
	return amqp.Publishing{Body: []byte(s), MessageId: s}, nil
}

func newPublisher(t *testing.T, cfg rabbitmq.PublisherConfig[string]) *rabbitmq.Publisher[string] {
	t.Helper()
	if cfg.Publishing == nil {
		cfg.Publishing = textPublishing
	}
	p, err := rabbitmq.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

var waitConfirms = rabbitmq.Confirms{Enabled: true, WaitFor: true}

// publishPipeline builds a pipeline that publishes items with pub.
func publishPipeline(t *testing.T, pub *rabbitmq.Publisher[string], items []string, opts ...pipeline.Option) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("publish", opts...)
	pipeline.Sink(b, "publish", pipeline.Source(b, "items", pipelinetest.NewSliceSource(items...)), pub)
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

func assertAMQPCode(t *testing.T, err error, code int) {
	t.Helper()
	var ae *amqp.Error
	if assert.ErrorAs(t, err, &ae) {
		assert.Equal(t, code, ae.Code, "%v", ae)
	}
}

// TestPublishMissingExchange: a publisher to an exchange that does not
// exist fails at Open, permanently, so that node retry does not try again.
func TestPublishMissingExchange(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, Exchange: uniqueName(t), Confirms: waitConfirms})
	rec := &pipelinetest.Recorder{}
	_, err := publishPipeline(t, pub, []string{"x"}, pipeline.WithObserver(rec)).Run(ctx)
	require.Error(t, err)
	assertAMQPCode(t, err, amqp.NotFound)
	assert.Contains(t, err.Error(), "rabbitmq: exchange ")
	assert.False(t, resilience.IsTransient(err))
	assert.Empty(t, pipelinetest.Of[observer.RetryEvent](rec), "a missing exchange is not retried")
}

// TestPublishExchangeDeleted: when the exchange disappears after Open,
// the broker closes the channel; the Write that published fails with the
// broker's reason, permanently, and the next Write opens a new channel.
func TestPublishExchangeDeleted(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	ex, q := uniqueName(t), uniqueName(t)
	a.declareQueue(q, nil)
	a.cleanup(nil, ex)
	declare := func() {
		ch := a.channel()
		require.NoError(t, ch.ExchangeDeclare(ex, amqp.ExchangeFanout, false, false, false, false, nil))
		require.NoError(t, ch.QueueBind(q, "", ex, false, nil))
	}
	declare()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, Exchange: ex, Confirms: waitConfirms})
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, "one"))
	require.NoError(t, a.channel().ExchangeDelete(ex, false, false))

	err := pub.Write(ctx, "two")
	require.Error(t, err)
	assertAMQPCode(t, err, amqp.NotFound)
	assert.False(t, resilience.IsTransient(err), "a refusal is permanent: %v", err)

	declare()
	require.NoError(t, pub.Write(ctx, "three"))
	ready, _ := a.depth(q)
	assert.Equal(t, 2, ready)
}

// TestPublishMandatoryReturned publishes concurrently, on one channel,
// messages that some queue takes and messages none takes: each
// unroutable one fails, permanently, with the broker's return, and only
// those: returns are matched to their publishes.
func TestPublishMandatoryReturned(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	ex, q := uniqueName(t), uniqueName(t)
	a.declareQueue(q, nil)
	a.cleanup(nil, ex)
	ch := a.channel()
	require.NoError(t, ch.ExchangeDeclare(ex, amqp.ExchangeDirect, false, false, false, false, nil))
	require.NoError(t, ch.QueueBind(q, "routed", ex, false, nil))
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{
		URL: a.url, Exchange: ex, Mandatory: true, Confirms: waitConfirms,
		Route: func(s string) string { return s[:len(s)-3] },
	})
	require.NoError(t, pub.Open(ctx))

	const n = 50
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[2*i] = pub.Write(ctx, fmt.Sprintf("routed%03d", i)) })
		wg.Go(func() { errs[2*i+1] = pub.Write(ctx, fmt.Sprintf("nowhere%03d", i)) })
	}
	wg.Wait()
	for i := range n {
		assert.NoError(t, errs[2*i])
		err := errs[2*i+1]
		require.ErrorIs(t, err, rabbitmq.ErrReturned)
		var re *rabbitmq.ReturnError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "nowhere", re.RoutingKey)
		assert.EqualValues(t, amqp.NoRoute, re.ReplyCode)
		assert.False(t, resilience.IsTransient(err))
	}
	ready, _ := a.depth(q)
	assert.Equal(t, n, ready)
}

// TestPublishNackRetried makes the broker nack a publish for real: the
// queue holds one message and rejects more (x-overflow=reject-publish).
// The nack is transient, so item retry tries again after its backoff, by
// which time the test made room, and the publish goes through.
func TestPublishNackRetried(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	clock := clockwork.NewFakeClock()
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, RoutingKey: q, Confirms: waitConfirms, Clock: clock})
	rec := &pipelinetest.Recorder{}
	p := publishPipeline(t, pub, []string{"a", "b"}, pipeline.WithObserver(rec), pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
		}))
	run := pipelinetest.Start(ctx, p)

	retries, err := pipelinetest.WaitFor[observer.RetryEvent](ctx, rec, 1)
	require.NoError(t, err)
	assert.ErrorIs(t, retries[0].Err, rabbitmq.ErrNacked)
	assert.True(t, resilience.IsTransient(retries[0].Err))
	msg, ok, err := a.channel().Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "a", string(msg.Body))
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Second)

	_, err = run.Wait()
	require.NoError(t, err)
	msg, ok, err = a.channel().Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "b", string(msg.Body))
}

// TestPublishConfirmTimeoutRetried holds the broker's answers back in a
// proxy, so that a confirm really is late: the wait times out (on the fake
// clock), item retry publishes again once the answers flow, and the broker
// ends with two copies, since it had taken the first one after all.
func TestPublishConfirmTimeoutRetried(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	clock := clockwork.NewFakeClock()
	const timeout = 5 * time.Second
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Clock: clock,
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: timeout}})
	require.NoError(t, pub.Open(ctx)) // the handshake needs the broker's answers
	px.pause()
	rec := &pipelinetest.Recorder{}
	p := publishPipeline(t, pub, []string{"late"}, pipeline.WithObserver(rec), pipeline.WithClock(clock),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
		}))
	run := pipelinetest.Start(ctx, p)

	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the confirm's wait
	clock.Advance(timeout)
	retries, err := pipelinetest.WaitFor[observer.RetryEvent](ctx, rec, 1)
	require.NoError(t, err)
	assert.ErrorIs(t, retries[0].Err, rabbitmq.ErrConfirmTimeout)
	assertUnknown(t, retries[0].Err)
	px.resume()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the retry's backoff
	clock.Advance(time.Second)

	_, err = run.Wait()
	require.NoError(t, err)
	ready, _ := a.depth(q)
	assert.Equal(t, 2, ready, "the first publish was taken, only its confirm was late")
}

// TestPubRetryReconnects cuts the publisher's connection: the next Write
// fails before the broker takes its message, and the publisher's own retry
// reconnects and publishes it.
func TestPubRetryReconnects(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: q, Confirms: waitConfirms,
		PubRetry: rabbitmq.PubRetry{Enabled: true, MaxRetry: 5, Delay: 10 * time.Millisecond}})
	require.NoError(t, pub.Open(ctx))
	px.cut()

	require.NoError(t, pub.Write(ctx, "after-cut"))
	assert.Equal(t, 2, px.connections(), "the publisher reconnected once")
	ready, _ := a.depth(q)
	assert.Equal(t, 1, ready)
}

// TestPubRetryGivesUp: with no broker to reconnect to, the publisher's
// retries run out and the error is marked as retried, which the pipeline's
// layers take as permanent.
func TestPubRetryGivesUp(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	px := newProxy(t, a.url)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: px.url(a.url), RoutingKey: uniqueName(t), Confirms: waitConfirms,
		PubRetry: rabbitmq.PubRetry{Enabled: true, MaxRetry: 2, Delay: time.Millisecond}})
	require.NoError(t, pub.Open(ctx))
	px.Close()

	err := pub.Write(ctx, "lost")
	require.Error(t, err)
	attempts, ok := resilience.RetriedAttempts(err)
	assert.True(t, ok)
	assert.Equal(t, 3, attempts)
	assert.False(t, resilience.IsTransient(err))
	assert.Contains(t, err.Error(), "rabbitmq: publish gave up after 3 attempts")
}

// TestPublishWithoutWaiting publishes without waiting for each confirm:
// Flush waits for them all, and fails the run when the broker nacked some.
func TestPublishWithoutWaiting(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	confirms := rabbitmq.Confirms{Enabled: true}

	q := uniqueName(t)
	a.declareQueue(q, nil)
	pub := newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, RoutingKey: q, Confirms: confirms})
	_, err := publishPipeline(t, pub, ids(500)).Run(ctx)
	require.NoError(t, err)
	ready, _ := a.depth(q)
	assert.Equal(t, 500, ready)

	full := uniqueName(t)
	a.declareQueue(full, amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"})
	pub = newPublisher(t, rabbitmq.PublisherConfig[string]{URL: a.url, RoutingKey: full, Confirms: confirms})
	_, err = publishPipeline(t, pub, ids(3)).Run(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, rabbitmq.ErrNacked)
	assert.Contains(t, err.Error(), "rabbitmq: 2 publishes not confirmed")
}

// TestPublisherConfig: every problem of a config is reported at once.
func TestPublisherConfig(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[string]{Mandatory: true, PubRetry: rabbitmq.PubRetry{MaxRetry: -1}})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	for _, field := range []string{"Publishing", "URL", "Mandatory", "PubRetry.MaxRetry"} {
		assert.Contains(t, err.Error(), "rabbitmq: "+field+" = ")
	}
	var ce *rabbitmq.ConfigError
	assert.True(t, errors.As(err, &ce))
}
