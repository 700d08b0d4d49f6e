package rabbitmq_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/pipeline"
)

// Draining a consumer: the source stops consuming, every message it
// emitted is written and acked, Run returns nil, and what it had not
// emitted goes back to the queue: written + left in the queue = published.
func TestDrainAcksWhatWasEmittedAndRequeuesTheRest(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, Prefetch: 16})
	require.NoError(t, err)
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, ids(500)...)

	b := pipeline.New("drain")
	var (
		p       *pipeline.Pipeline
		mu      sync.Mutex
		written = map[string]int{}
		n       atomic.Int64
	)
	pipeline.SinkFunc(b, "store", pipeline.Source(b, "consume", src), func(_ context.Context, m rabbitmq.Message) error {
		mu.Lock()
		written[m.MessageID]++
		mu.Unlock()
		if n.Add(1) == 100 {
			p.Drain()
		}
		return nil
	})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(ctx)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range written {
		assert.Equal(t, 1, c, "message %s written once", id)
	}
	ready, consumers := a.depth(q)
	assert.Zero(t, consumers, "the consumer is gone")
	assert.Equal(t, 500, len(written)+ready, "written and acked, or back in the queue: nothing lost")
	assert.Less(t, len(written), 500, "the drain stopped the consumer")
}
