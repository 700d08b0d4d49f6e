package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A wait longer than the longest tier is not handed off (the broker would
// bring the message back too early): it stays in process, and the next call
// comes no sooner than the Retry-After the dependency asked for.
func TestHandOffKeepsAWaitLongerThanEveryTier(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanupTopology(q, "100ms")
	cfg := rabbitmq.SourceConfig{
		URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 2,
			Delays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, HandOffAfter: 50 * time.Millisecond},
	}
	src, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	a.cleanupTopology(q, "50ms")
	require.NoError(t, src.Open(ctx))
	require.NoError(t, src.Close(ctx))
	a.publish(q, "m")
	var (
		mu    sync.Mutex
		times []time.Time
	)
	handle := node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if len(times) == 1 {
			return m, resilience.RetryAfter(errFlaky, 3*time.Second) // "come back in 3s"
		}
		return m, nil
	})
	b := pipeline.New("handoff", pipeline.WithDeadLetter(src.DeadLetter(deadletter.NewMemory(10))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 5
		}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src), handle)
	pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
		src.Stop()
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(ctx)
	require.NoError(t, err)
	require.Len(t, times, 2)
	handled, _ := res.Node("handle")
	t.Logf("second call %v after the first; Retry-After was 3s; handed off %d", times[1].Sub(times[0]), handled.HandedOff)
	assert.GreaterOrEqual(t, times[1].Sub(times[0]), 3*time.Second, "the Retry-After is honoured")
}
