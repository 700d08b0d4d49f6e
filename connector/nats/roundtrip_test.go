package nats_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/pipeline"
)

// A round trip: every message published is emitted once and acked, and
// the consumer has nothing pending when the run drains.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, ids(300)...)

	src, err := nats.NewSource(a.config(name))
	require.NoError(t, err)
	b := pipeline.New("roundtrip")
	var (
		p    *pipeline.Pipeline
		mu   sync.Mutex
		seen = map[string]int{}
	)
	pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Data)]++
		assert.Equal(t, 1, m.Deliveries)
		assert.Equal(t, string(m.Data), m.MsgID())
		if len(seen) == 300 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Len(t, seen, 300)
	for id, n := range seen {
		assert.Equal(t, 1, n, id)
	}
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumAckPending, "every message acked")
	assert.Zero(t, info.NumPending)
	assert.Zero(t, info.NumRedelivered)
	assert.Equal(t, uint64(300), info.AckFloor.Stream)
}

// Two pipelines pulling from one durable consumer share its messages:
// together they store every message once, and both get some.
func TestCompetingConsumersShareTheWork(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	const n = 400
	a.publish(subject, ids(n)...)

	var (
		mu   sync.Mutex
		seen = map[string]int{}
		per  [2]int
		srcs [2]*nats.Source
		errs = make(chan error, 2)
	)
	for i := range srcs {
		cfg := a.config(name)
		cfg.Batch = 8
		src, err := nats.NewSource(cfg)
		require.NoError(t, err)
		srcs[i] = src
		b := pipeline.New("share")
		pipeline.ForEach(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m nats.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen[string(m.Data)]++
			per[i]++
			if len(seen) == n {
				srcs[0].Stop()
				srcs[1].Stop()
			}
			return nil
		})
		p, err := b.Build()
		require.NoError(t, err)
		go func() {
			_, err := p.Run(testContext(t))
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	assert.Len(t, seen, n)
	for id, c := range seen {
		assert.Equal(t, 1, c, id)
	}
	assert.Positive(t, per[0], "the first consumer got a share")
	assert.Positive(t, per[1], "the second consumer got a share")
	assert.Zero(t, a.consumerAfterAcks(name, name).NumAckPending)
}
