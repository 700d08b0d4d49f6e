package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var (
	errFlaky = errors.New("flaky dependency")
	errBad   = errors.New("bad input")
)

// A handler fails by script, per message and per delivery, and records
// when each message was delivered.
type handler struct {
	mu         sync.Mutex
	calls      map[string]int
	deliveries map[string][]time.Time // first call of each delivery
}

func (h *handler) Process(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
	h.mu.Lock()
	h.calls[m.MessageID]++
	if d := h.deliveries[m.MessageID]; len(d) == m.Retries {
		h.deliveries[m.MessageID] = append(d, time.Now())
	}
	h.mu.Unlock()
	switch {
	case m.MessageID == "flaky" && m.Retries < 2:
		return m, resilience.MarkTransient(errFlaky)
	case m.MessageID == "poison":
		return m, resilience.MarkTransient(errFlaky)
	case m.MessageID == "bad":
		return m, resilience.MarkPermanent(errBad)
	}
	return m, nil
}

// TestRetryTopology runs three messages through the broker's retry
// topology: one failing (transiently) on its first two deliveries, one
// always failing, one failing permanently. Each delivery also gets one
// in-process item retry first, so the topology is the outer layer.
func TestRetryTopology(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q)
	const delay = 100 * time.Millisecond
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: delay},
	})
	require.NoError(t, err)
	// The source declares the topology when it opens; publish after that.
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, "flaky", "poison", "bad")

	var (
		mu        sync.Mutex
		delivered []rabbitmq.Message
	)
	dlq := deadletter.NewMemory(10)
	check := func() {
		if len(delivered) == 1 && dlq.Len() == 2 {
			src.Stop()
		}
	}
	store := node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, m)
		check()
		return nil
	})
	dead := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		err := dlq.Write(ctx, env)
		check()
		return err
	})
	h := &handler{calls: map[string]int{}, deliveries: map[string][]time.Time{}}
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("retry",
		pipeline.WithObserver(rec),
		pipeline.WithDeadLetter(src.DeadLetter(dead)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.NoBackoff()
		}))
	handled := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src), node.Transform[rabbitmq.Message, rabbitmq.Message](h))
	pipeline.Sink(b, "store", handled, store)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(ctx)
	require.NoError(t, err)
	if n, ok := res.Node("handle"); assert.True(t, ok) {
		assert.Equal(t, int64(2), n.DeadLettered)
		assert.Equal(t, int64(5), n.BrokerRetries)
	}

	// flaky: two deliveries of two calls each, then a third delivery that
	// worked, each delivery at least the TTL after the one before.
	require.Len(t, delivered, 1)
	assert.Equal(t, "flaky", delivered[0].MessageID)
	assert.Equal(t, 2, delivered[0].Retries, "the count travels with the message")
	assert.Equal(t, q+"_retry", delivered[0].Exchange, "redelivered through the retry exchange")
	h.mu.Lock()
	assert.Equal(t, 5, h.calls["flaky"])
	assert.Equal(t, 8, h.calls["poison"], "1 + MaxRetry deliveries, 2 calls each")
	assert.Equal(t, 1, h.calls["bad"], "a permanent failure is retried by no layer")
	times := h.deliveries["flaky"]
	h.mu.Unlock()
	require.Len(t, times, 3)
	for i := 1; i < len(times); i++ {
		assert.GreaterOrEqual(t, times[i].Sub(times[i-1]), delay, "delivery %d waited in the retry queue", i)
	}

	// poison: in the dead-letter sink after MaxRetry trips; bad: at once.
	envs := dlq.Envelopes()
	require.Len(t, envs, 2)
	byID := map[string]deadletter.Envelope{}
	for _, env := range envs {
		byID[env.Item.(rabbitmq.Message).MessageID] = env
	}
	poison := byID["poison"]
	assert.Equal(t, 3, poison.Item.(rabbitmq.Message).Retries)
	assert.ErrorIs(t, poison.Err, resilience.ErrRetryExhausted)
	assert.ErrorIs(t, poison.Err, errFlaky)
	assert.Contains(t, poison.CorrelationID, q+"/")
	// Its envelope tells every call of its four deliveries, not only the
	// last one's: the count, the history and the first failure travel
	// with the message through the retry topology.
	assert.Equal(t, 8, poison.Attempts, "every call, across deliveries")
	require.Len(t, poison.History, 8)
	for i, a := range poison.History {
		assert.Equal(t, resilience.ItemRetry, a.Layer)
		assert.Equal(t, i%2, a.Retry, "each delivery's calls count from 0")
		assert.Equal(t, errFlaky.Error(), a.Err)
	}
	assert.Equal(t, poison.History[0].Time, poison.FirstFailure, "the first failure is the first delivery's")
	assert.GreaterOrEqual(t, poison.LastFailure.Sub(poison.FirstFailure), 3*delay, "three trips through the retry queue")
	assert.Equal(t, "handle", poison.OriginNode)
	assert.Equal(t, 8, mustInt(t, poison.Item.(rabbitmq.Message).Headers[rabbitmq.HeaderAttempts])+2, "the last delivery carried the first six calls")
	bad := byID["bad"]
	assert.Equal(t, 0, bad.Item.(rabbitmq.Message).Retries)
	assert.ErrorIs(t, bad.Err, errBad)

	// The engine dead-lettered every failed delivery (2 of flaky, 4 of
	// poison, 1 of bad); the source's sink turned 5 of them into broker
	// retries and let 2 through. Every queue is empty: what was not
	// retried was acked.
	events := pipelinetest.Of[observer.DeadLetterEvent](rec)
	assert.Len(t, events, 7)
	retried := 0
	for _, e := range events {
		if e.BrokerRetry {
			retried++
		}
	}
	assert.Equal(t, 5, retried, "the events say which went to the broker's retry")
	// Only the two letters in the sink count as dead letters: the five
	// broker retries are counted on their own, in Stats and in each run's
	// Result.
	st, ok := p.Stats().Node("handle")
	require.True(t, ok)
	assert.Equal(t, int64(2), st.DeadLettered, "what the dead-letter sink holds")
	assert.Equal(t, int64(5), st.BrokerRetries)
	assert.Equal(t, int64(7), st.Failed)
	assert.Contains(t, res.String(), "broker retries")
	for _, name := range []string{q, q + "_retry"} {
		ready, _ := a.depth(name)
		assert.Zero(t, ready, "queue %s is empty", name)
	}
	assertTopology(t, a, q, delay, "classic", false)
}

// assertTopology checks the declared topology with the broker: declaring
// an existing queue or exchange with the same settings succeeds, and with
// other settings fails with PRECONDITION_FAILED (a passive declare would
// not compare arguments).
func assertTopology(t *testing.T, a *admin, q string, delay time.Duration, queueType string, durable bool) {
	t.Helper()
	retryArgs := amqp.Table{
		"x-message-ttl":          delay.Milliseconds(),
		"x-dead-letter-exchange": q + "_retry",
		"x-queue-type":           queueType,
	}
	_, err := a.channel().QueueDeclare(q+"_retry", durable, false, false, false, retryArgs)
	assert.NoError(t, err, "the retry queue has the expected arguments")
	wrong := amqp.Table{"x-message-ttl": delay.Milliseconds() + 1, "x-dead-letter-exchange": q + "_retry", "x-queue-type": queueType}
	_, err = a.channel().QueueDeclare(q+"_retry", durable, false, false, false, wrong)
	assertPrecondition(t, err)

	mainArgs := amqp.Table{"x-dead-letter-exchange": q + "_dlx"}
	if queueType != "classic" {
		mainArgs["x-queue-type"] = queueType
	}
	_, err = a.channel().QueueDeclare(q, durable, false, false, false, mainArgs)
	assert.NoError(t, err, "the queue dead-letters into q_dlx")

	for _, ex := range []string{q + "_dlx", q + "_retry"} {
		assert.NoError(t, a.channel().ExchangeDeclare(ex, amqp.ExchangeFanout, durable, false, false, false, nil), "exchange %s is a fanout", ex)
		assertPrecondition(t, a.channel().ExchangeDeclare(ex, amqp.ExchangeDirect, durable, false, false, false, nil))
	}
}

func mustInt(t *testing.T, v any) int {
	t.Helper()
	n, ok := v.(int64)
	require.True(t, ok, "%T %v", v, v)
	return int(n)
}

func assertPrecondition(t *testing.T, err error) {
	t.Helper()
	var ae *amqp.Error
	if assert.ErrorAs(t, err, &ae) {
		assert.Equal(t, amqp.PreconditionFailed, ae.Code, "%v", ae)
	}
}

// TestRetryTopologyQuorum checks that the retry queue copies the type of a
// quorum queue.
func TestRetryTopologyQuorum(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q,
		Declare: &rabbitmq.QueueDeclaration{Durable: true, Args: amqp.Table{"x-queue-type": "quorum"}},
		Retry:   rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second, Durable: true},
	})
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	assertTopology(t, a, q, time.Second, "quorum", true)
}

// A message that failed in one node on its first delivery and in another
// on its second is dead-lettered by the second: the envelope's origin is
// where it first failed, its decision node where it was dead-lettered, and
// its history holds both deliveries' calls.
func TestBrokerRetryKeepsTheFirstOrigin(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: 10 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, "m")

	dlq := deadletter.NewMemory(1)
	dead := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		err := dlq.Write(ctx, env)
		src.Stop()
		return err
	})
	b := pipeline.New("origin", pipeline.WithDeadLetter(src.DeadLetter(dead)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		}))
	first := pipeline.Transform(b, "first", pipeline.Source(b, "consume", src),
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			if m.Retries == 0 {
				return m, resilience.MarkTransient(errFlaky)
			}
			return m, nil
		}))
	second := pipeline.Transform(b, "second", first,
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			return m, resilience.MarkPermanent(errBad)
		}))
	pipeline.Sink(b, "store", second, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.NoError(t, err)

	envs := dlq.Envelopes()
	require.Len(t, envs, 1)
	env := envs[0]
	assert.Equal(t, "first", env.OriginNode, "where it first failed")
	assert.Equal(t, "second", env.DecisionNode, "where it was dead-lettered")
	assert.Equal(t, 2, env.Attempts)
	require.Len(t, env.History, 2)
	assert.Equal(t, errFlaky.Error(), env.History[0].Err)
	assert.Equal(t, errBad.Error(), env.History[1].Err)
	assert.ErrorIs(t, env.Err, errBad)
}

// runRetryCase runs the messages of bodies through a source with the retry
// topology (Delay delay, MaxRetry 3) and handle, until stop says so; it
// returns the dead letters.
func runRetryCase(t *testing.T, delay time.Duration, bodies []amqp.Publishing, itemRetries int,
	handle func(a *admin, q string, m rabbitmq.Message) error, stop func(delivered, dead int) bool) []deadletter.Envelope {
	t.Helper()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q)
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: delay},
	})
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	ch := a.channel()
	for _, p := range bodies {
		require.NoError(t, ch.PublishWithContext(ctx, "", q, false, false, p))
	}
	var mu sync.Mutex
	delivered, dlq := 0, deadletter.NewMemory(100)
	b := pipeline.New("case", pipeline.WithDeadLetter(src.DeadLetter(deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		err := dlq.Write(ctx, env)
		if stop(delivered, dlq.Len()) {
			src.Stop()
		}
		return err
	}))), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
		o.ItemRetry.MaxRetries = itemRetries
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			return m, handle(a, q, m)
		}))
	pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		delivered++
		if stop(delivered, dlq.Len()) {
			src.Stop()
		}
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.NoError(t, err)
	return dlq.Envelopes()
}

// Errors with long texts do not make the copy's headers too big for a
// frame (which would close the connection and loop): the story is bounded,
// and the message reaches the dead-letter sink with every call counted.
func TestRetryCopyWithLongErrors(t *testing.T) {
	t.Parallel()
	long := resilience.MarkTransient(errors.New("upstream 503: " + strings.Repeat("x", 5<<10)))
	envs := runRetryCase(t, 10*time.Millisecond, []amqp.Publishing{{Body: []byte("m"), MessageId: "m"}}, 3,
		func(*admin, string, rabbitmq.Message) error { return long },
		func(_, dead int) bool { return dead == 1 })
	require.Len(t, envs, 1)
	assert.Equal(t, 16, envs[0].Attempts, "4 deliveries of 4 calls")
	require.Len(t, envs[0].History, 16)
	assert.LessOrEqual(t, len(envs[0].History[0].Err), 256, "carried texts are cut")
	assert.Equal(t, long.Error(), envs[0].History[15].Err, "the last delivery's are whole")
}

// A copy that no queue takes (the retry queue, or a tier of it, is gone)
// is an error of the dead-letter write: the run fails saying so, instead
// of looping, and the message is not lost: it is back in its queue.
func TestRetryCopyWithABrokenTopology(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		topology rabbitmq.RetryTopology
		gone     string
	}{
		"retry queue deleted": {rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: time.Hour}, "_retry"},
		"tier deleted":        {rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delays: []time.Duration{time.Hour, 2 * time.Hour}}, "_retry_1h"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			ctx := testContext(t)
			q := uniqueName(t)
			a.cleanupTopology(q, "1h", "2h")
			src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{
				URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
				Retry: tc.topology,
			})
			require.NoError(t, err)
			require.NoError(t, src.Open(ctx))
			require.NoError(t, src.Close(ctx))
			a.publish(q, "m")
			var calls atomic.Int64
			b := pipeline.New("broken", pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(10))),
				pipeline.WithDeadLetterRetry(1, resilience.NoBackoff()),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.OnItemFailure = resilience.DeadLetter
					o.ItemRetry.MaxRetries = 0
				}))
			h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
				node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
					if calls.Add(1) == 1 {
						// While the source runs: Open does not declare it again.
						_, err := a.channel().QueueDelete(q+tc.gone, false, false, false)
						require.NoError(t, err)
					}
					return m, resilience.MarkTransient(errFlaky)
				}))
			pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error { return nil }))
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(ctx)
			require.ErrorContains(t, err, "to the retry queue \""+q+tc.gone+"\" of queue")
			assert.Equal(t, int64(1), calls.Load(), "no loop")
			ready, _ := a.depth(q)
			assert.Equal(t, 1, ready, "the message is back in its queue")
		})
	}
}

// Story headers from another queue's topology (a message forwarded with
// its headers) are ignored: they neither count against MaxRetry nor enter
// the envelope. The copy's Expiration is left off, so the retry queue's
// TTL is the delay.
func TestRetryStoryBelongsToItsQueue(t *testing.T) {
	t.Parallel()
	// The message's own TTL is shorter than the delay, and long enough not
	// to expire before the source consumes it.
	const delay = 3 * time.Second
	var mu sync.Mutex
	var times []time.Time
	envs := runRetryCase(t, delay, []amqp.Publishing{{Body: []byte("m"), MessageId: "m", Expiration: "2000",
		Headers: amqp.Table{rabbitmq.HeaderRetries: int64(3), rabbitmq.HeaderAttempts: int64(12), rabbitmq.HeaderOriginNode: "elsewhere", rabbitmq.HeaderQueue: "other-queue"}}}, 0,
		func(*admin, string, rabbitmq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			if len(times) == 1 {
				return resilience.MarkTransient(errFlaky)
			}
			return resilience.MarkPermanent(errBad)
		},
		func(_, dead int) bool { return dead == 1 })
	require.Len(t, envs, 1)
	assert.Equal(t, 2, envs[0].Attempts, "the foreign 12 are not counted")
	assert.Equal(t, "handle", envs[0].OriginNode)
	require.Len(t, times, 2, "one broker retry: the foreign 3 trips do not count")
	assert.GreaterOrEqual(t, times[1].Sub(times[0]), delay, "the retry queue's TTL, not the message's 2 s")
}
