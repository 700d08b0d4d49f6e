package nats_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	natsgo "github.com/nats-io/nats.go"
	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

var errBroken = errors.New("broken for good")

// A message is acked only once its item reached an outcome: while a node
// holds them every message is pending on the server; Filtered, Skipped and
// Delivered then ack them, and a permanent failure that was dead-lettered
// in process terminates its message, once, without a redelivery.
func TestAckOnlyOnTerminalOutcome(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	terminated := a.terminations(name)
	a.publish(subject, ids(20)...)

	src, err := nats.NewSource(a.config(name))
	require.NoError(t, err)
	dlq := deadletter.NewMemory(10)
	release := make(chan struct{})
	var (
		p       *pipeline.Pipeline
		entered atomic.Int64
		stored  atomic.Int64
	)
	b := pipeline.New("outcomes", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) { o.ItemRetry.MaxRetries = 0 }))
	msgs := pipeline.Source(b, "consume", src)
	// m-00000..m-00004 are filtered, m-00005..m-00009 skipped, m-00010 is
	// dead-lettered, the rest are delivered.
	kept := pipeline.Filter(b, "filter", msgs, func(m nats.Message) bool { return string(m.Data) >= "m-00005" })
	held := pipeline.Map(b, "hold", kept, func(ctx context.Context, m nats.Message) (nats.Message, error) {
		if entered.Add(1) == 15 {
			// Every message that passed the filter is held here.
			close(release)
		}
		<-release
		if string(m.Data) < "m-00010" {
			return m, errBroken
		}
		return m, nil
	}, pipeline.Parallel(15), pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	pipeline.ForEach(b, "store", held, func(_ context.Context, m nats.Message) error {
		if string(m.Data) == "m-00010" {
			return resilience.MarkPermanent(errBroken)
		}
		if stored.Add(1) == 9 {
			p.Drain()
		}
		return nil
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	p, err = b.Build()
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	<-release
	require.NoError(t, <-done)

	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending, "every message settled")
	assert.Zero(t, info.NumRedelivered, "none comes back")
	assert.Equal(t, uint64(20), info.AckFloor.Stream)
	require.Len(t, dlq.Envelopes(), 1)
	env := dlq.Envelopes()[0]
	assert.Equal(t, "m-00010", string(env.Item.(nats.Message).Data))
	assert.Equal(t, name+"/11", env.CorrelationID)
	waitFor(t, "the termination advisory", func() bool { return terminated.Load() == 1 })
	assert.Equal(t, int64(1), terminated.Load(), "terminated once")
}

// While a node holds the messages, none is acked.
func TestUnsettledMessagesStayPending(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, ids(10)...)

	src, err := nats.NewSource(a.config(name))
	require.NoError(t, err)
	release := make(chan struct{})
	var (
		p       *pipeline.Pipeline
		mu      sync.Mutex
		entered int
		stored  int
	)
	b := pipeline.New("pending")
	held := pipeline.Map(b, "hold", pipeline.Source(b, "consume", src), func(ctx context.Context, m nats.Message) (nats.Message, error) {
		mu.Lock()
		entered++
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return m, nil
	}, pipeline.Parallel(10))
	pipeline.ForEach(b, "store", held, func(context.Context, nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if stored++; stored == 10 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "every message held", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return entered == 10
	})
	info := a.consumer(name, name)
	assert.Equal(t, 10, info.NumAckPending, "held, not acked")
	close(release)
	require.NoError(t, <-done)
	info = a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending)
	assert.Equal(t, uint64(10), info.AckFloor.Stream)
}

// terminations counts the server's advisories of messages that a consumer
// of stream terminated.
func (a *admin) terminations(stream string) *atomic.Int64 {
	a.t.Helper()
	var n atomic.Int64
	sub, err := a.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+stream+".>", func(m *natsgo.Msg) {
		if strings.Contains(string(m.Data), stream) {
			n.Add(1)
		}
	})
	require.NoError(a.t, err)
	require.NoError(a.t, a.nc.Flush())
	a.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}
