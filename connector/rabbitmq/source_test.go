package rabbitmq_test

import (
	"context"
	"errors"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

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

func newSource(t *testing.T, cfg rabbitmq.SourceConfig) *rabbitmq.Source {
	t.Helper()
	src, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	return src
}

func consumePipeline(t *testing.T, src *rabbitmq.Source, sink node.Sink[rabbitmq.Message], opts ...pipeline.Option) *pipeline.Pipeline {
	t.Helper()
	b := pipeline.New("consume", opts...)
	pipeline.Sink(b, "store", pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 5
		o.NodeRestart.Backoff = resilience.NoBackoff()
	})), sink)
	p, err := b.Build()
	require.NoError(t, err)
	return p
}

// TestSourceReconnects cuts the source's connection in the middle of a
// run: Run ends with a transient error, node restart opens the source
// again, the broker redelivers what was not acked, and every message
// arrives; the settlements of items that were in flight on the dead
// channel are dropped without harm.
func TestSourceReconnects(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	const n = 500
	a.publish(q, ids(n)...)
	px := newProxy(t, a.url)
	src := newSource(t, rabbitmq.SourceConfig{URL: px.url(a.url), Queue: q, Prefetch: 20})
	seen := newSeenSet(n, src.Stop)
	written := 0
	sink := node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
		if written++; written == 100 {
			px.cut()
		}
		return seen.Write(ctx, m)
	})
	rec := &pipelinetest.Recorder{}
	res, err := consumePipeline(t, src, sink, pipeline.WithObserver(rec)).Run(ctx)
	require.NoError(t, err)

	counts := seen.counts()
	require.Len(t, counts, n)
	consume, ok := res.Node("consume")
	require.True(t, ok)
	assert.EqualValues(t, 1, consume.NodeRestarts)
	retries := pipelinetest.Of[observer.RetryEvent](rec)
	require.Len(t, retries, 1)
	assert.Equal(t, resilience.NodeRestart, retries[0].Kind)
	assert.ErrorIs(t, retries[0].Err, rabbitmq.ErrConnectionLost)
	assert.True(t, resilience.IsTransient(retries[0].Err))
	assert.Equal(t, 2, px.connections())
	ready, consumers := a.depth(q)
	assert.Zero(t, ready)
	assert.Zero(t, consumers)
}

// TestSourceStopDrains stops the source while the pipeline holds messages:
// the items in flight finish and are acked before the connection closes,
// and what the broker had not sent stays in the queue.
func TestSourceStopDrains(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.declareQueue(q, nil)
	const n = 1000
	a.publish(q, ids(n)...)
	src := newSource(t, rabbitmq.SourceConfig{URL: a.url, Queue: q, Prefetch: 50})
	var mu sync.Mutex
	seen := map[string]int{}
	sink := node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[m.MessageID]++; len(seen) == 10 {
			src.Stop()
		}
		return nil
	})
	res, err := consumePipeline(t, src, sink).Run(ctx)
	require.NoError(t, err)
	store, ok := res.Node("store")
	require.True(t, ok)
	delivered := int(store.Out)
	assert.Greater(t, delivered, 10, "items in flight when Stop came were finished")
	assert.Len(t, seen, delivered, "none twice")
	ready, consumers := a.depth(q)
	assert.Equal(t, n-delivered, ready, "every delivered message was acked, the rest is in the queue")
	assert.Zero(t, consumers)
}

// TestSourceMissingQueue: a queue that does not exist fails Open
// permanently, so node retry does not repeat it.
func TestSourceMissingQueue(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	src := newSource(t, rabbitmq.SourceConfig{URL: a.url, Queue: uniqueName(t)})
	rec := &pipelinetest.Recorder{}
	_, err := consumePipeline(t, src, &pipelinetest.Collector[rabbitmq.Message]{}, pipeline.WithObserver(rec)).Run(ctx)
	require.Error(t, err)
	assertAMQPCode(t, err, amqp.NotFound)
	assert.False(t, resilience.IsTransient(err))
	assert.Empty(t, pipelinetest.Of[observer.RetryEvent](rec))
}

// TestSourceNoBroker: a refused connection is transient, so node retry
// runs Open again.
func TestSourceNoBroker(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	px := newProxy(t, a.url)
	url := px.url(a.url)
	px.Close()
	src := newSource(t, rabbitmq.SourceConfig{URL: url, Queue: "none", DialTimeout: time.Second})
	err := src.Open(testContext(t))
	require.Error(t, err)
	assert.True(t, resilience.IsTransient(err), "%v", err)
	assert.Contains(t, err.Error(), "rabbitmq: connect to ")
	// The error names the URL it tried, without its password.
	u, perr := neturl.Parse(url)
	require.NoError(t, perr)
	assert.Contains(t, err.Error(), u.Redacted())
	if pw, ok := u.User.Password(); ok {
		assert.NotContains(t, err.Error(), ":"+pw+"@")
	}
}

// TestSourceConfig: every problem of a config is reported at once.
func TestSourceConfig(t *testing.T) {
	t.Parallel()
	_, err := rabbitmq.NewSource(rabbitmq.SourceConfig{Prefetch: -1, Retry: rabbitmq.RetryTopology{Enabled: true}})
	require.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	for _, field := range []string{"URL", "Queue", "Prefetch", "Retry.MaxRetry", "Retry.Delay"} {
		assert.Contains(t, err.Error(), "rabbitmq: "+field+" = ")
	}
	_, err = rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "amqp://localhost/", Queue: "q",
		Declare: &rabbitmq.QueueDeclaration{Args: amqp.Table{"x-queue-type": "quorum"}},
		Retry:   rabbitmq.RetryTopology{Enabled: true, MaxRetry: 1, Delay: time.Second, AutoDelete: true}})
	var ce *rabbitmq.ConfigError
	require.True(t, errors.As(err, &ce))
	assert.Contains(t, err.Error(), "Retry.Durable")
	assert.Contains(t, err.Error(), "Retry.AutoDelete")
	_, err = rabbitmq.NewSource(rabbitmq.SourceConfig{URL: "http://localhost/", Queue: "q"})
	assert.ErrorIs(t, err, rabbitmq.ErrInvalidConfig)
	assert.NotContains(t, err.Error(), "localhost", "the URL, which may hold a password, is not echoed")
}
