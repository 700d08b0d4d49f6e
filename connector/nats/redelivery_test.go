package nats_test

// Guarantees of redelivery and settlement: a nak's delay under BackOff,
// in-progress acks, the poison guard and broker retries, the publisher
// after Close, and the config checks that keep the server from refusing
// the consumer.

import (
	"context"
	"runtime"

	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// tracked is one EmitTracked call seen by a chanEmitter.
type tracked struct {
	m    nats.Message
	done func(node.Outcome)
	at   time.Time
}

// chanEmitter hands each tracked message to the test.
type chanEmitter struct{ ch chan tracked }

func (e chanEmitter) Emit(ctx context.Context, m nats.Message) error {
	return e.EmitTracked(ctx, m, func(node.Outcome) {})
}

func (e chanEmitter) EmitAt(ctx context.Context, m nats.Message, _ []byte) error {
	return e.Emit(ctx, m)
}

func (e chanEmitter) EmitTracked(ctx context.Context, m nats.Message, done func(node.Outcome)) error {
	select {
	case e.ch <- tracked{m: m, done: done, at: time.Now()}:
		return nil
	case <-ctx.Done():
		done(node.Failed)
		return context.Cause(ctx)
	}
}

// runSource opens src and runs it on an emitter until the test ends.
func runSource(t *testing.T, src *nats.Source) chan tracked {
	ch, _ := runStoppable(t, src)
	return ch
}

// runStoppable is runSource with a stop that ends the run and closes the
// source (its last acks flushed); it runs at the end of the test too.
func runStoppable(t *testing.T, src *nats.Source) (chan tracked, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	require.NoError(t, src.Open(ctx))
	ch := make(chan tracked)
	end := make(chan error, 1)
	go func() { end <- src.Run(ctx, chanEmitter{ch: ch}) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-end
			_ = src.Close(context.Background())
		})
	}
	t.Cleanup(stop)
	return ch, stop
}

func next(t *testing.T, ch chan tracked) tracked {
	t.Helper()
	select {
	case tr := <-ch:
		return tr
	case <-testContext(t).Done():
		t.Fatal("no delivery")
		return tracked{}
	}
}

// With BackOff on the consumer, a nak's delay still gives the wait asked
// for. NATS 2.9 counts the delay from the consumer's AckWait (BackOff[0])
// but expires it against the ack wait of delivery n (BackOff[n-1]), so
// the source sends the delay less BackOff[n-1] - BackOff[0]: a hand-off
// of delivery 2 waits its delay, not delay + BackOff[1] - BackOff[0]
// (4.4 s rather than 2.5 s here), and
// the broker's retry of delivery 3 waits BackOff[2] (the last repeated),
// not 2*BackOff[2] - BackOff[0], which Redeliveries' longest wait counts.
func TestNakDelayWaitsWhatItAsksWithBackOff(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "x")

	cfg := a.config(name)
	cfg.BackOff = []time.Duration{100 * time.Millisecond, 2 * time.Second}
	cfg.MaxDeliver = 5
	cfg.Retry = nats.BrokerRetry{Enabled: true, HandOffAfter: 50 * time.Millisecond}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	_, longest := src.Redeliveries()
	require.Equal(t, 2*time.Second, longest)
	ch := runSource(t, src)

	d1 := next(t, ch)
	d1.done(node.Failed) // a plain nak: delivery 2 comes at once
	d2 := next(t, ch)
	require.Equal(t, 2, d2.m.Deliveries)

	// Longer than BackOff[1] - BackOff[0], below which the server's wait
	// is that difference.
	const delay = 2500 * time.Millisecond
	require.NoError(t, d2.m.HandOff(testContext(t), deadletter.HandOff{Delay: delay, Retry: 1}))
	start := time.Now()
	d2.done(node.HandedOff)
	d3 := next(t, ch)
	waited := d3.at.Sub(start)
	t.Logf("hand-off asked %v, delivery %d came after %v", delay, d3.m.Deliveries, waited)
	require.Equal(t, 3, d3.m.Deliveries)
	assert.GreaterOrEqual(t, waited, delay, "the hand-off's wait")
	assert.Less(t, waited, delay+time.Second, "the hand-off's wait is the one asked for, as BrokerRetry documents")

	// The broker's retry of delivery 3 waits BackOff[1], the last repeated.
	sink := src.DeadLetter(deadletter.Func(func(context.Context, deadletter.Envelope) error {
		t.Error("the broker's retry wrote the envelope")
		return nil
	}))
	require.NoError(t, sink.Write(testContext(t), deadletter.Envelope{Item: d3.m, Err: resilience.MarkTransient(errFlaky)}))
	start = time.Now()
	d3.done(node.DeadLettered)
	d4 := next(t, ch)
	waited = d4.at.Sub(start)
	t.Logf("broker retry of delivery 3: delivery %d came after %v", d4.m.Deliveries, waited)
	d4.done(node.Delivered)
	assert.GreaterOrEqual(t, waited, longest, "BackOff[1]")
	assert.Less(t, waited, longest+time.Second, "the broker's retry waits BackOff[n-1], as Redeliveries counts")
}

// The server's ack wait of delivery n is BackOff[n-1], so ProgressInterval
// is defaulted from, and checked against, the shortest BackOff wait: with
// a BackOff that shrinks, the in-progress acks of a later delivery still
// come before its ack wait runs out.
func TestProgressIntervalIsShorterThanEveryBackOffWait(t *testing.T) {
	t.Parallel()
	cfg := nats.SourceConfig{URL: "nats://127.0.0.1:4222", Stream: "s", Consumer: "c",
		BackOff: []time.Duration{3 * time.Second, 200 * time.Millisecond}, MaxDeliver: 3}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	assert.Less(t, src.Config().ProgressInterval, 200*time.Millisecond, "the default is shorter than every BackOff wait")
	cfg.ProgressInterval = time.Second
	var ce *nats.ConfigError
	require.ErrorAs(t, cfg.Validate(), &ce, "a ProgressInterval longer than BackOff[1]")
	assert.Equal(t, "ProgressInterval", ce.Field)
}

// The same, on the server: delivery 2 of a message, held in process for
// longer than its ack wait BackOff[1], is kept alive by the default
// in-progress acks, and the server does not deliver it a third time while
// the pipeline still holds it.
func TestHeldMessageIsNotRedeliveredWithShrinkingBackOff(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "x")

	cfg := a.config(name)
	cfg.BackOff = []time.Duration{3 * time.Second, 300 * time.Millisecond}
	cfg.MaxDeliver = 5
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	ch := runSource(t, src)

	d1 := next(t, ch)
	d1.done(node.Failed) // nak: delivery 2 comes at once
	d2 := next(t, ch)
	require.Equal(t, 2, d2.m.Deliveries)
	defer d2.done(node.Delivered)
	// Hold delivery 2 for 4.5s (the server checks its pending messages on
	// a timer of AckWait = BackOff[0]); nothing else must come meanwhile.
	hold := time.NewTimer(4500 * time.Millisecond)
	defer hold.Stop()
	select {
	case d3 := <-ch:
		d3.done(node.Delivered)
		t.Fatalf("delivery %d of the message came while delivery 2 was held and kept alive", d3.m.Deliveries)
	case <-hold.C:
	}
}

// A closed publisher refuses to publish, with a permanent ErrNotOpen,
// rather than dial a connection that nothing closes; Open makes it
// publish again.
func TestPublisherRefusesWriteAfterClose(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	pub, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: subject, Message: orderMessage})
	require.NoError(t, err)
	ctx := testContext(t)
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Close(ctx))
	werr := pub.Write(ctx, order{ID: "after-close"})
	require.ErrorIs(t, werr, nats.ErrNotOpen, "Write after Close")
	assert.False(t, resilience.IsTransient(werr), "a write after Close is the program's error")
	assert.Equal(t, uint64(0), a.messages(name), "a closed publisher stored a message")
	require.NoError(t, pub.Open(ctx))
	require.NoError(t, pub.Write(ctx, order{ID: "reopened"}))
	require.NoError(t, pub.Close(ctx))
	assert.Equal(t, uint64(1), a.messages(name), "an opened publisher publishes again")
}

// The poison guard counts failed runs, not the connector's own
// redeliveries: a message that fails transiently twice and goes through
// the broker's retry each time (MaxDeliver 5) is stored at its third
// delivery under MaxDeliveries 2, not dead-lettered as poison. Hand-offs
// do not count either.
func TestBrokerRetryIsNotCountedAsPoison(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "flaky")

	cfg := a.config(name)
	cfg.MaxDeliver = 5
	cfg.MaxDeliveries = 2
	cfg.Retry = nats.BrokerRetry{Enabled: true, Delay: 50 * time.Millisecond}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)

	ended := make(chan string, 4)
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		ended <- "dead-lettered: " + env.ErrText
		return nil
	})
	b := pipeline.New("poisonretry", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		}))
	var calls atomic.Int64
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		if calls.Add(1) < 3 {
			return resilience.MarkTransient(errFlaky)
		}
		ended <- "stored"
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	res := make(chan error, 1)
	go func() { _, err := p.Run(ctx); res <- err }()
	var fate string
	select {
	case fate = <-ended:
	case <-ctx.Done():
		t.Fatal("the message neither stored nor dead-lettered")
	}
	p.Drain()
	require.NoError(t, <-res)
	assert.Equal(t, "stored", fate, "two transient failures under a broker retry of MaxDeliver 5 are not poison")
}

// In-progress acks never follow their message's settlement on the wire:
// the acker sends both, and a +WPI only for a message still held when it
// takes the settlements queued. A +WPI after a -NAK {"delay"} would
// restart the message's ack wait (the server sets its timestamp to now),
// and a message handed off for 10 s would come back after AckWait (2 s).
// Each round holds 1000 messages, hands each off for 10 s and settles them
// while the progress ticker ticks without pause; then nothing comes back
// within twice AckWait.
func TestProgressAckNeverFollowsTheNak(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	var name string
	for round := range 5 {
		var late int
		name, late = progressRound(t, a)
		assert.Zero(t, late, "round %d: +WPI after their message's -NAK", round)
	}
	// Nothing may come back before 10 s: pull for twice AckWait.
	c, err := a.js.Consumer(testContext(t), name, name)
	require.NoError(t, err)
	batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*progressAckWait))
	require.NoError(t, err)
	early := 0
	for m := range batch.Messages() {
		early++
		_ = m.Ack()
	}
	assert.Zero(t, early, "messages handed off for 10s came back within 2*AckWait")
}

const progressAckWait = 2 * time.Second

// progressRound holds 1000 messages of a new stream, hands each off for
// 10 s and settles them while the progress ticker ticks, closes the
// source, and returns the stream's name and how many +WPI followed their
// message's -NAK on the wire.
func progressRound(t *testing.T, a *admin) (string, int) {
	name := uniqueName(t)
	subject := a.stream(name)
	const n = 1000
	a.publish(subject, ids(n)...)

	clock := clockwork.NewFakeClock()
	cfg := a.config(name)
	cfg.AckWait = progressAckWait
	cfg.ProgressInterval = 500 * time.Millisecond
	cfg.Batch = n
	cfg.MaxAckPending = n
	cfg.MaxDeliver = 5
	cfg.Retry = nats.BrokerRetry{Enabled: true, Delay: time.Second, HandOffAfter: time.Millisecond}
	cfg.Clock = clock
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)

	var (
		wireMu sync.Mutex
		naked  = map[string]bool{}
		late   int
	)
	sub, err := a.nc.Subscribe("$JS.ACK."+name+".>", func(m *natsgo.Msg) {
		wireMu.Lock()
		defer wireMu.Unlock()
		switch b := string(m.Data); {
		case b == "+WPI":
			if naked[m.Subject] {
				late++
			}
		case strings.HasPrefix(b, "-NAK"):
			naked[m.Subject] = true
		}
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, a.nc.Flush())
	ch, stopRun := runStoppable(t, src)

	held := make([]tracked, 0, n)
	for range n {
		held = append(held, next(t, ch))
	}
	ctx := testContext(t)
	for _, tr := range held {
		require.NoError(t, tr.m.HandOff(ctx, deadletter.HandOff{Delay: 10 * time.Second, Retry: 1}))
	}
	// Settle while the progress ticker ticks, as it would on a busy source
	// with a short interval: a tick every 20 settlements, each sending
	// in-progress acks for the messages still held.
	for i, tr := range held {
		if i%20 == 0 {
			clock.Advance(cfg.ProgressInterval)
			runtime.Gosched()
		}
		tr.done(node.HandedOff)
	}
	stopRun() // every ack sent and flushed
	waitFor(t, "every -NAK on the wire", func() bool {
		wireMu.Lock()
		defer wireMu.Unlock()
		return len(naked) == n
	})
	require.NoError(t, a.nc.Flush())
	wireMu.Lock()
	defer wireMu.Unlock()
	return name, late
}

// BackOff needs a MaxDeliver above its length, which NATS refuses
// otherwise ("max deliver is required to be > length of backoff values",
// err_code 10116): Validate says so up front, as a *ConfigError naming
// MaxDeliver, rather than Open failing with the server's error.
func TestBackOffWithoutMaxDeliverIsAConfigError(t *testing.T) {
	t.Parallel()
	cfg := nats.SourceConfig{URL: "nats://127.0.0.1:4222", Stream: "s", Consumer: "c",
		BackOff: []time.Duration{time.Second}}
	err := cfg.Validate()
	var ce *nats.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "MaxDeliver", ce.Field)
	cfg.MaxDeliver = 2
	assert.NoError(t, cfg.Validate())
}
