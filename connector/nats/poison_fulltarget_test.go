package nats_test

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A good message whose sink publishes to a full stream (DiscardNew) fails
// every run, as often as MaxDeliveries: the stream's state is not the
// message's fault, so the source never counts it as poison and nothing is
// dead-lettered; once the stream has room, the message goes through.
func TestFullTargetStreamDoesNotPoisonAGoodMessage(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "order-1")
	out := uniqueName(t) + "-out"
	a.cleanup(out)
	ctx := testContext(t)
	_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: out, Subjects: []string{out + ".>"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	a.publish(out+".in", "filler") // the target stream is full

	const maxDeliveries = 3
	cfg := a.config(name)
	cfg.MaxDeliveries = maxDeliveries
	cfg.Batch = 1
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	pub, err := nats.NewPublisher(nats.PublisherConfig[nats.Message]{
		URL: a.url, Subject: out + ".in",
		Message: func(m nats.Message) (*natsgo.Msg, error) { return &natsgo.Msg{Data: m.Data}, nil },
	})
	require.NoError(t, err)
	dead := deadletter.NewMemory(10)
	b := pipeline.New("full", pipeline.WithDeadLetter(dead), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	pipeline.Sink(b, "publish", pipeline.Source(b, "consume", src), pub)
	p, err := b.Build()
	require.NoError(t, err)
	for i := range maxDeliveries + 1 {
		_, err := p.Run(ctx)
		require.Error(t, err, "run %d", i+1)
	}
	assert.Zero(t, src.Poisoned(), "a good message counted as poison")
	assert.Empty(t, dead.Envelopes(), "a good message dead-lettered")

	s, err := a.js.Stream(ctx, out)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx))
	run := pipelinetest.Start(ctx, p)
	waitFor(t, "the message in the target stream", func() bool { return a.messages(out) == 1 })
	p.Drain()
	_, err = run.Wait()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), a.messages(out))
}
