package rabbitmq_test

import (
	"context"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

func textPublishing(s string) (amqp.Publishing, error) {
	return amqp.Publishing{Body: []byte(s), MessageId: s}, nil
}

// A seenSet is an idempotent sink's memory: how often each message id
// arrived. It calls full once, when it holds want distinct ids.
type seenSet struct {
	mu   sync.Mutex
	seen map[string]int
	want int
	full func()
}

func newSeenSet(want int, full func()) *seenSet {
	return &seenSet{seen: make(map[string]int), want: want, full: full}
}

func (s *seenSet) Write(_ context.Context, m rabbitmq.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[m.MessageID]++
	if len(s.seen) == s.want && s.seen[m.MessageID] == 1 {
		s.full()
	}
	return nil
}

func (s *seenSet) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// TestRoundTrip publishes 10 000 messages with the Publisher and consumes
// them with the Source: each reaches the sink exactly once, and the queue
// is empty afterwards, which also proves every message was acked (the
// broker requeues what a closed connection had not acked).
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	const n = 10_000
	want := ids(n)

	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[string]{
		URL: a.url, RoutingKey: q, Publishing: textPublishing,
		Confirms: rabbitmq.Confirms{Enabled: true, WaitFor: true},
	})
	require.NoError(t, err)
	b := pipeline.New("publish")
	pipeline.Sink(b, "publish", pipeline.Source(b, "ids", pipelinetest.NewSliceSource(want...)), pub, pipeline.Parallel(16))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(ctx)
	require.NoError(t, err)
	publish, ok := res.Node("publish")
	require.True(t, ok)
	assert.EqualValues(t, n, publish.Out)
	ready, _ := a.depth(q)
	require.Equal(t, n, ready, "every confirmed publish is in the queue")

	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q, Prefetch: 256})
	require.NoError(t, err)
	seen := newSeenSet(n, src.Stop)
	b = pipeline.New("consume")
	pipeline.Sink(b, "store", pipeline.Source(b, "consume", src), node.Sink[rabbitmq.Message](seen))
	p, err = b.Build()
	require.NoError(t, err)
	res, err = p.Run(ctx)
	require.NoError(t, err)

	counts := seen.counts()
	require.Len(t, counts, n)
	for _, id := range want {
		assert.Equal(t, 1, counts[id], "message %s", id)
	}
	store, ok := res.Node("store")
	require.True(t, ok)
	assert.EqualValues(t, n, store.Out)
	ready, consumers := a.depth(q)
	assert.Zero(t, ready, "every message was acked")
	assert.Zero(t, consumers, "the source cancelled its consumer")
}
