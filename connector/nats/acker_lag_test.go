package nats_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/pipeline"
)

// A settled message counts against Batch until its ack is written to the
// connection: with the acker held up, the source pulls no more than Batch
// messages, so the server never has more than Batch of them unacked, and
// a crash or a cut link gives back at most Batch. (When a message counted
// free as soon as its ack was queued, a lagging acker let the source pull
// batch after batch: 53 unacked at a cut with Batch 20 under CI load.)
func TestLaggingAckerHoldsBackPulls(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	const n, batch = 50, 10
	a.publish(subject, ids(n)...)

	cfg := a.config(name)
	cfg.Batch = batch
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	open, waitedOnAcks := gateAcker(src)
	t.Cleanup(open)

	var stored atomic.Int64
	b := pipeline.New("acker-lag")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, nats.Message) error {
		stored.Add(1)
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(testContext(t))
		done <- err
	}()

	waitFor(t, "the source to wait for its acks, or to pull past its batch", func() bool {
		return waitedOnAcks.Load() || stored.Load() > batch
	})
	assert.EqualValues(t, batch, stored.Load(), "while no ack is sent, the source holds one batch")
	c := a.consumer(name, name)
	assert.Equal(t, batch, c.NumAckPending, "the server has one batch unacked")
	assert.EqualValues(t, n-batch, c.NumPending, "the rest was never delivered")

	open()
	waitFor(t, "every message stored", func() bool { return stored.Load() >= n })
	p.Drain()
	require.NoError(t, <-done)
	assert.EqualValues(t, n, stored.Load(), "each message stored once")
	c = a.consumerAfterAcks(name, name)
	assert.Equal(t, 0, c.NumAckPending, "every message acked")
	assert.EqualValues(t, 0, c.NumPending)
}

// gateAcker holds back the acker of src's sessions until open is called
// (once or more), and reports in waitedOnAcks whether Run waited for room
// with nothing held but settlements not yet written.
func gateAcker(src *nats.Source) (open func(), waitedOnAcks *atomic.Bool) {
	gate := make(chan struct{})
	var once sync.Once
	waitedOnAcks = new(atomic.Bool)
	nats.GateAcker(src, gate, func(held, unsent int) {
		if held == 0 && unsent > 0 {
			waitedOnAcks.Store(true)
		}
	})
	return func() { once.Do(func() { close(gate) }) }, waitedOnAcks
}
