package nats_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

var errFlaky = errors.New("flaky")

// seen records the deliveries a node saw, by message.
type seen struct {
	mu sync.Mutex
	by map[string][]delivery
}

type delivery struct {
	at         time.Time
	deliveries int
}

func (s *seen) add(m nats.Message) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string][]delivery{}
	}
	k := string(m.Data)
	s.by[k] = append(s.by[k], delivery{at: time.Now(), deliveries: m.Deliveries})
	return len(s.by[k])
}

func (s *seen) of(k string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.by[k]...)
}

// The broker's retry: a transient failure after the in-process retries is
// nak'd with the wait of its delivery (BackOff), and the server delivers
// it again after it; the last delivery MaxDeliver allows is dead-lettered,
// its envelope counting every delivery's call, and terminated. A message
// that works on its second delivery is acked.
func TestBrokerRetryRedeliversAfterItsDelay(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "flaky", "broken", "fine")

	cfg := a.config(name)
	cfg.MaxDeliver = 3
	cfg.BackOff = []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}
	cfg.Retry = nats.BrokerRetry{Enabled: true}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	retries, longest := src.Redeliveries()
	assert.Equal(t, 2, retries)
	assert.Equal(t, 600*time.Millisecond, longest)

	dlq := deadletter.NewMemory(10)
	var (
		p      *pipeline.Pipeline
		s      seen
		mu     sync.Mutex
		stored []string
	)
	// The run drains once both messages are stored and the third is
	// dead-lettered, whichever comes last.
	finished := func() {
		mu.Lock()
		defer mu.Unlock()
		if len(dlq.Envelopes()) == 1 && len(stored) == 2 {
			p.Drain()
		}
	}
	final := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
		err := dlq.Write(ctx, env)
		finished()
		return err
	})
	b := pipeline.New("brokerretry", pipeline.WithDeadLetter(src.DeadLetter(final)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		n := s.add(m)
		switch {
		case string(m.Data) == "broken", string(m.Data) == "flaky" && n == 1:
			return resilience.MarkTransient(errFlaky)
		}
		mu.Lock()
		stored = append(stored, string(m.Data))
		mu.Unlock()
		finished()
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	res, err := p.Run(testContext(t))
	require.NoError(t, err)

	assert.ElementsMatch(t, []string{"fine", "flaky"}, stored)
	// One dead letter, the one the sink holds; the three naks with a
	// wait are broker retries (flaky once, broken twice).
	if n, ok := res.Node("store"); assert.True(t, ok) {
		assert.Equal(t, int64(1), n.DeadLettered, "what the dead-letter sink holds")
		assert.Equal(t, int64(3), n.BrokerRetries)
	}
	broken := s.of("broken")
	require.Len(t, broken, 3, "MaxDeliver deliveries")
	for i, d := range broken {
		assert.Equal(t, i+1, d.deliveries, "the server's count")
	}
	assert.GreaterOrEqual(t, broken[1].at.Sub(broken[0].at), 300*time.Millisecond, "BackOff[0]")
	assert.Less(t, broken[1].at.Sub(broken[0].at), 300*time.Millisecond+time.Second, "BackOff[0]")
	assert.GreaterOrEqual(t, broken[2].at.Sub(broken[1].at), 600*time.Millisecond, "BackOff[1]")
	assert.Less(t, broken[2].at.Sub(broken[1].at), 600*time.Millisecond+time.Second, "BackOff[1]")
	flaky := s.of("flaky")
	require.Len(t, flaky, 2)
	assert.GreaterOrEqual(t, flaky[1].at.Sub(flaky[0].at), 300*time.Millisecond)
	assert.Less(t, flaky[1].at.Sub(flaky[0].at), 300*time.Millisecond+time.Second)

	require.Len(t, dlq.Envelopes(), 1)
	env := dlq.Envelopes()[0]
	assert.Equal(t, "broken", string(env.Item.(nats.Message).Data))
	assert.Equal(t, 3, env.Attempts, "one call per delivery")
	assert.Len(t, env.History, 3, "the story of every delivery")
	assert.Equal(t, broken[0].at.Truncate(time.Second).IsZero(), env.FirstFailure.IsZero())
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending)
	assert.Equal(t, uint64(3), info.AckFloor.Stream, "the dead-lettered message was terminated")
}

// A hand-off: an item retry that would wait at least HandOffAfter is nak'd
// with exactly that wait; the next delivery goes on with the retries where
// they were, and the item is stored once.
func TestHandOffNaksWithTheWait(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "m")

	cfg := a.config(name)
	cfg.MaxDeliver = 5
	cfg.Retry = nats.BrokerRetry{Enabled: true, Delay: time.Second, HandOffAfter: 100 * time.Millisecond}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, src.HandOffAfter())

	var (
		s       seen
		resumed []bool
		stored  int
	)
	// Call 1 fails asking for 300ms (handed off); call 2, the next
	// delivery's, asks for 10ms (in process); call 3 works.
	script := []time.Duration{300 * time.Millisecond, 10 * time.Millisecond}
	dlq := deadletter.NewMemory(10)
	b := pipeline.New("handoff", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 5
		}))
	h := pipeline.Map(b, "handle", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) (nats.Message, error) {
		n := len(s.of("m"))
		s.add(m)
		_, ok := m.Resumed()
		resumed = append(resumed, ok)
		if n < len(script) {
			return m, resilience.RetryAfter(errFlaky, script[n])
		}
		return m, nil
	})
	pipeline.ForEach(b, "store", h, func(context.Context, nats.Message) error {
		stored++
		src.Stop()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(testContext(t))
	require.NoError(t, err)

	assert.Equal(t, 1, stored)
	assert.Empty(t, dlq.Envelopes())
	calls := s.of("m")
	require.Len(t, calls, 3)
	assert.Equal(t, []int{1, 2, 2}, []int{calls[0].deliveries, calls[1].deliveries, calls[2].deliveries})
	assert.Equal(t, []bool{false, true, true}, resumed, "the second delivery resumes the retries")
	assert.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 300*time.Millisecond, "the server held it for the wait")
	assert.Equal(t, int64(1), nodeOf(t, res, "handle").HandedOff)
	assert.Equal(t, int64(2), nodeOf(t, res, "handle").ItemRetries)
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending)
	assert.Equal(t, uint64(1), info.AckFloor.Stream)
}

// An item retried in process for longer than AckWait is not delivered
// again meanwhile, and neither are the messages waiting behind it for room
// downstream: the source's in-progress acks hold every message it holds.
func TestInProgressHoldsALongRetry(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "slow", "b", "c", "d", "e", "f")

	cfg := a.config(name)
	cfg.AckWait = time.Second
	cfg.Batch = 8
	// The pull request stays open while the messages wait: a message whose
	// ack wait ran out would be delivered again into it.
	cfg.PullWait = 5 * time.Second
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	assert.Equal(t, cfg.AckWait/3, src.Config().ProgressInterval)

	var (
		s      seen
		stored atomic.Int64
	)
	b := pipeline.New("inprogress", pipeline.WithBuffer(1), pipeline.WithHandOverBatch(1), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(1200 * time.Millisecond)
	}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		if s.add(m) < 3 && string(m.Data) == "slow" {
			return resilience.MarkTransient(errFlaky)
		}
		if stored.Add(1) == 6 {
			src.Stop()
		}
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)

	calls := s.of("slow")
	require.Len(t, calls, 3)
	assert.GreaterOrEqual(t, calls[2].at.Sub(calls[0].at), 2400*time.Millisecond, "longer than AckWait")
	for _, c := range calls {
		assert.Equal(t, 1, c.deliveries, "never delivered again")
	}
	for _, k := range []string{"b", "c", "d", "e", "f"} {
		got := s.of(k)
		require.Len(t, got, 1, k)
		assert.Equal(t, 1, got[0].deliveries, "%s waited behind the retry, and was not delivered again", k)
		assert.GreaterOrEqual(t, got[0].at.Sub(calls[0].at), 2400*time.Millisecond, "%s waited", k)
	}
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumRedelivered)
	assert.Zero(t, info.NumAckPending)
	assert.Zero(t, src.Redelivered())
}

// The poison guard counts the runs a message failed, which the copies a
// source publishes carry (nats.HeaderFailures), not the server's
// deliveries: a message delivered twice elsewhere and nak'd (a plain
// client) is emitted; a copy that says it failed MaxDeliveries runs of
// this consumer, as one published by another process would, is not: it
// is dead-lettered with ErrPoison and the story its headers carry, and
// terminated. A copy for another consumer of the stream is acked unseen.
// The next message goes through.
func TestPoisonGuard(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "nakd")

	cfg := a.config(name)
	cfg.MaxDeliveries = 2
	cfg.MaxDeliver = 10
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	// Open creates the consumer; without a dead-letter sink it refuses.
	err = src.Open(testContext(t))
	var ce *nats.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "MaxDeliveries", ce.Field)
	assert.False(t, resilience.IsTransient(err))

	// Two deliveries of "nakd" end elsewhere (a plain client naks them).
	cons, err := a.js.CreateConsumer(testContext(t), name, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: nats.DefaultAckWait, MaxDeliver: 10})
	require.NoError(t, err)
	for range 2 {
		batch, err := cons.Fetch(1)
		require.NoError(t, err)
		for m := range batch.Messages() {
			require.Equal(t, "nakd", string(m.Data()))
			require.NoError(t, m.Nak())
		}
	}
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	copyOf := func(body, consumer string) {
		h := natsgo.Header{}
		h.Set(nats.HeaderConsumer, consumer)
		h.Set(nats.HeaderFailures, "2")
		h.Set(nats.HeaderSequence, "7")
		h.Set(nats.HeaderDeliveries, "3")
		h.Set(nats.HeaderMsgID, "order-7")
		// A copy's own id, as the source of consumer publishes it.
		h.Set(jetstream.MsgIDHeader, "sluice:"+consumer+":7:2")
		h.Set(jetstream.ExpectedStreamHeader, name)
		h.Set(nats.HeaderAttempts, "2")
		h.Set(nats.HeaderFirstFailure, first.Format(time.RFC3339Nano))
		h.Set(nats.HeaderFirstNode, "parse")
		h.Set(nats.HeaderHistory, `[{"time":"2026-12-01T10:00:00Z","layer":"item_retry","retry":0,"error":"bad json","node":"parse"},`+
			`{"time":"2026-12-01T10:00:05Z","layer":"item_retry","retry":0,"error":"panic: nil map","node":"price"}]`)
		_, err := a.js.PublishMsg(testContext(t), &natsgo.Msg{Subject: subject, Header: h, Data: []byte(body)})
		require.NoError(t, err)
	}
	copyOf("poison", name+"/"+name)
	copyOf("theirs", name+"/other")
	a.publish(subject, "fine")

	dlq := deadletter.NewMemory(10)
	var (
		mu     sync.Mutex
		stored []string
	)
	b := pipeline.New("poison", pipeline.WithDeadLetter(dlq))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		stored = append(stored, string(m.Data))
		if string(m.Data) == "fine" {
			src.Stop()
		}
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)

	assert.Equal(t, []string{"nakd", "fine"}, stored, "deliveries that failed no run do not count; the copy for another consumer is not emitted")
	assert.Equal(t, int64(1), src.Poisoned())
	require.Len(t, dlq.Envelopes(), 1)
	env := dlq.Envelopes()[0]
	assert.ErrorIs(t, env.Err, nats.ErrPoison)
	assert.Contains(t, env.ErrText, "failed 2 runs; MaxDeliveries is 2")
	assert.Contains(t, env.ErrText, `"order-7"`, "named by the first message's id")
	assert.Equal(t, name+"/7", env.CorrelationID, "the first message's sequence")
	assert.Equal(t, 2, env.Attempts, "one call in each failed run")
	assert.Equal(t, "parse", env.OriginNode, "the node that failed first")
	assert.Equal(t, "consume", env.DecisionNode)
	assert.Equal(t, first, env.FirstFailure)
	assert.Equal(t, first.Add(5*time.Second), env.LastFailure)
	require.Len(t, env.History, 2)
	assert.Equal(t, "price", env.History[1].Node)
	assert.Equal(t, "panic: nil map", env.History[1].Err)
	m, ok := env.Item.(nats.Message)
	require.True(t, ok)
	assert.Equal(t, 4, m.Deliveries, "3 of the earlier copies, 1 of this one")
	assert.Equal(t, "order-7", m.MsgID())
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending)
	assert.Zero(t, info.NumPending)
}

// A message on its last delivery (MaxDeliver) is not handed off: the
// server would not deliver it again, so its wait stays in process.
func TestNoHandOffOnTheLastDelivery(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "m")

	cfg := a.config(name)
	cfg.MaxDeliver = 1
	cfg.Retry = nats.BrokerRetry{Enabled: true, Delay: time.Second, HandOffAfter: 10 * time.Millisecond}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var s seen
	b := pipeline.New("lastdelivery", pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 1 }))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		if s.add(m) == 1 {
			return resilience.RetryAfter(errFlaky, 50*time.Millisecond)
		}
		src.Stop()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(testContext(t))
	require.NoError(t, err)
	calls := s.of("m")
	require.Len(t, calls, 2)
	assert.Equal(t, 1, calls[1].deliveries, "retried in process")
	assert.Zero(t, nodeOf(t, res, "store").HandedOff)
	assert.Equal(t, uint64(1), a.consumer(name, name).AckFloor.Stream)
}
