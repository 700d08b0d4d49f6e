package nats_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/pipeline"
)

// collect runs a fresh source on the consumer until it has stored want
// messages, and returns them. AckWait is a minute: messages that the run
// before did not give back would not come within the test's deadline.
func collect(t *testing.T, a *admin, name string, want int) map[string]int {
	t.Helper()
	cfg := a.config(name)
	cfg.AckWait = time.Minute
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got = map[string]int{}
	)
	b := pipeline.New("collect")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[string(m.Data)]++
		if len(got) == want {
			src.Stop()
		}
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	return got
}

// Draining a consumer: the source stops fetching, every message it
// emitted is written and acked, Run returns nil, and what it held but had
// not emitted is given back (within PullWait, a second here, when the run
// gave up a waiting pull request): a second consumer gets exactly the
// rest, long before AckWait.
func TestDrainAcksWhatWasEmittedAndGivesBackTheRest(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, ids(500)...)

	cfg := a.config(name)
	cfg.AckWait = time.Minute
	cfg.Batch = 16
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var (
		p       *pipeline.Pipeline
		mu      sync.Mutex
		written = map[string]int{}
		n       atomic.Int64
	)
	b := pipeline.New("drain")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		mu.Lock()
		written[string(m.Data)]++
		mu.Unlock()
		if n.Add(1) == 100 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	for id, c := range written {
		assert.Equal(t, 1, c, "message %s written once", id)
	}
	assert.Less(t, len(written), 500, "the drain stopped the consumer")
	// Given back: the server counts a nak'd message as pending until it
	// delivers it again, so the proof is the next consumer's.

	rest := collect(t, a, name, 500-len(written))
	for id, c := range rest {
		assert.Equal(t, 1, c, id)
		assert.NotContains(t, written, id, "acked messages do not come back")
	}
	assert.Equal(t, 500, len(written)+len(rest), "nothing lost")
}

// Cancelling the run gives back every message held at once, those the
// pipeline was working on included.
func TestCancelGivesMessagesBack(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, ids(50)...)

	cfg := a.config(name)
	cfg.AckWait = time.Minute
	cfg.Batch = 20
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var entered atomic.Int64
	b := pipeline.New("cancel")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(ctx context.Context, m nats.Message) error {
		entered.Add(1)
		<-ctx.Done() // never done
		return context.Cause(ctx)
	}, pipeline.Parallel(5))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		done <- err
	}()
	waitFor(t, "the sinks to hold messages", func() bool { return entered.Load() == 5 })
	waitFor(t, "the source to hold a batch", func() bool { return a.consumer(name, name).NumAckPending == 20 })
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	got := collect(t, a, name, 50)
	assert.Len(t, got, 50, "every message comes back")
}

// Stop ends Run cleanly: what the server had sent is emitted and acked.
func TestStopFinishesWhatWasSent(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, ids(40)...)

	src, err := nats.NewSource(a.config(name))
	require.NoError(t, err)
	var stored atomic.Int64
	b := pipeline.New("stop")
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(context.Context, nats.Message) error {
		if stored.Add(1) == 1 {
			src.Stop()
		}
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending, "every message emitted was acked")
	assert.Equal(t, uint64(stored.Load()), info.AckFloor.Stream)
	assert.Equal(t, 40, int(stored.Load())+int(info.NumPending), "the rest waits in the stream")
}
