package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A poison message among 1,000 good ones, with OnItemFailure = Fail: each
// run it enters fails, and the consumer starts again. After MaxDeliveries
// failed runs the source dead-letters it, once, into a durable file, and
// acks it; every good message is written, including those that were in
// flight each time a run failed.
func TestPoisonMessageStopsLooping(t *testing.T) {
	t.Parallel()
	for name, decl := range map[string]*rabbitmq.QueueDeclaration{
		"classic": {},
		"quorum":  {Durable: true, Args: amqp.Table{"x-queue-type": "quorum"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			ctx := testContext(t)
			q := uniqueName(t)
			a.cleanup([]string{q})
			const maxDeliveries = 5
			cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: decl, MaxDeliveries: maxDeliveries}
			first, err := rabbitmq.NewSource(cfg)
			require.NoError(t, err)
			first.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
			require.NoError(t, first.Open(ctx))
			require.NoError(t, first.Close(ctx))
			bodies := ids(1000)
			bodies = append(bodies[:500], append([]string{"poison"}, bodies[500:]...)...)
			a.publish(q, bodies...)

			path := filepath.Join(t.TempDir(), "dead.jsonl")
			file, err := deadletter.OpenFile(path)
			require.NoError(t, err)
			t.Cleanup(func() { _ = file.Close() })
			var (
				mu      sync.Mutex
				written = map[string]int{}
				dead    int
			)
			runs, failedRuns := 0, 0
			for runs < 2*maxDeliveries {
				runs++
				src, err := rabbitmq.NewSource(cfg)
				require.NoError(t, err)
				finished := func() bool { return len(written) == 1000 && dead == 1 }
				sink := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
					mu.Lock()
					defer mu.Unlock()
					dead++
					if finished() {
						src.Stop()
					}
					return file.Write(ctx, env)
				})
				b := pipeline.New("poison", pipeline.WithDeadLetter(sink))
				h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
					node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
						if m.MessageID == "poison" {
							return m, resilience.MarkPermanent(errBad)
						}
						return m, nil
					}))
				pipeline.Sink(b, "store", h, node.SinkFunc[rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) error {
					mu.Lock()
					defer mu.Unlock()
					written[m.MessageID]++
					if finished() {
						src.Stop()
					}
					return nil
				}))
				p, err := b.Build()
				require.NoError(t, err)
				_, err = p.Run(ctx)
				if err != nil {
					require.ErrorIs(t, err, errBad, "run %d", runs)
					failedRuns++
				}
				mu.Lock()
				done := finished()
				mu.Unlock()
				if done {
					break
				}
			}
			assert.Equal(t, maxDeliveries, failedRuns, "each of the poison's deliveries failed one run")
			assert.Len(t, written, 1000, "every good message is written")
			var envs []deadletter.Envelope
			for env, err := range deadletter.ReadFile(path) {
				require.NoError(t, err)
				envs = append(envs, env)
			}
			require.Len(t, envs, 1, "the poison is dead-lettered once")
			assert.ErrorContains(t, errors.New(envs[0].ErrText), "poison message")
			assert.Contains(t, envs[0].ErrText, fmt.Sprintf("failed %d deliveries", maxDeliveries))
			ready, _ := a.depth(q)
			assert.Zero(t, ready, "nothing left in the queue")
		})
	}
}

// Without the pipeline's dead-letter sink, a source with MaxDeliveries
// does not open: a poison message would have nowhere to go.
func TestMaxDeliveriesNeedsADeadLetterSink(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: 2})
	require.NoError(t, err)
	b := pipeline.New("no-dlq")
	pipeline.Sink(b, "store", pipeline.Source(b, "consume", src), node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	_, err = p.Run(ctx)
	var ce *rabbitmq.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "MaxDeliveries", ce.Field)
}
