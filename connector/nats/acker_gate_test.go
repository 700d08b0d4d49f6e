package nats_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A run cancelled while GateAcker holds the acker back returns: the held
// acker also gives up when Close aborts the session (CloseTimeout, 200 ms
// here), since Close closes the connection only after the acker ended.
func TestCloseDuringGatedAckerReturns(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	const n, batch = 20, 10
	a.publish(subject, ids(n)...)

	cfg := a.config(name)
	cfg.Batch = batch
	cfg.CloseTimeout = 200 * time.Millisecond
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	open, waitedOnAcks := gateAcker(src)
	b := pipeline.New("gated-close")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, nats.Message) error { return nil })
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		done <- err
	}()
	// Registered after the run's goroutine: cleanups run last-in first-out,
	// so the gate opens (and the run can end) before goleak looks.
	t.Cleanup(func() { open(); <-done })
	waitFor(t, "the source to wait for its acks", waitedOnAcks.Load)
	cancel()
	select {
	case <-done:
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second): // a guard, not a pace: CloseTimeout is 200ms
		t.Fatal("Run did not return 10s after its context was cancelled, with CloseTimeout 200ms: Close waits for a gated acker forever")
	}
}

// A message nak'd with a delay (the broker retry) is settled for the
// source, which pulls more, but stays in the consumer's ack pending at the
// server until its delay ends: with every item failing transiently, the
// server's NumAckPending climbs past Batch to every message of the stream.
// docs/nats.md says so, and that MaxAckPending must leave room for them.
func TestDelayedNaksStayAckPendingPastBatch(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	const n, batch = 40, 10
	a.publish(subject, ids(n)...)

	cfg := a.config(name)
	cfg.Batch = batch
	cfg.MaxDeliver = 5
	cfg.Retry = nats.BrokerRetry{Enabled: true, Delay: time.Minute}
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)

	var failed atomic.Int64
	b := pipeline.New("delayed-naks", pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(n))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 0
		}))
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, nats.Message) error {
		failed.Add(1)
		return resilience.MarkTransient(errFlaky)
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()
	waitFor(t, "every message to fail once", func() bool { return failed.Load() >= n })
	waitFor(t, "the naks to reach the server", func() bool { return a.consumer(name, name).NumPending == 0 })
	c := a.consumer(name, name)
	p.Drain()
	require.NoError(t, <-done)
	assert.Equal(t, n, c.NumAckPending,
		"every message waits out its delayed nak in the consumer's ack pending, past Batch")
}
