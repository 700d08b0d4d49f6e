package rabbitmq_test

import (
	"context"
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

// With the documented setup, WithDeadLetter(src.DeadLetter(next)), the
// poison guard writes through the retry sink: the story of earlier
// deliveries is merged once, and even a Classifier that judges every error
// transient does not send the poison message round the retry topology.
func TestPoisonThroughTheRetrySink(t *testing.T) {
	t.Parallel()
	for name, cl := range map[string]resilience.Classifier{"default": {}, "all transient": resilience.AllTransient()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := newAdmin(t)
			ctx := testContext(t)
			q := uniqueName(t)
			a.cleanupTopology(q)
			cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: 2,
				Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 3, Delay: time.Minute, Classifier: cl}}
			src, err := rabbitmq.NewSource(cfg)
			require.NoError(t, err)
			src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
			require.NoError(t, src.Open(ctx))
			require.NoError(t, src.Close(ctx))
			// A message that earlier runs failed twice, after 3 calls.
			ch := a.channel()
			require.NoError(t, ch.Confirm(false))
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{MessageId: "p", Body: []byte("p"), Headers: amqp.Table{
				rabbitmq.HeaderQueue: q, rabbitmq.HeaderAttempts: int64(3), rabbitmq.HeaderDeliveries: int64(2),
				rabbitmq.HeaderRetries: int64(0), rabbitmq.HeaderHistory: "[]"}})
			require.NoError(t, err)
			ok, err := dc.WaitContext(ctx)
			require.NoError(t, err)
			require.True(t, ok)

			src, err = rabbitmq.NewSource(cfg)
			require.NoError(t, err)
			mem := deadletter.NewMemory(10)
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			// The dead letter's arrival ends the run; if it never came,
			// the test's deadline would fail Run.
			stopping := deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
				defer src.Stop()
				return mem.Write(ctx, env)
			})
			b := pipeline.New("poison", pipeline.WithDeadLetter(src.DeadLetter(stopping)))
			pipeline.Sink(b, "store", pipeline.Source(b, "consume", src), node.SinkFunc[rabbitmq.Message](func(context.Context, rabbitmq.Message) error {
				t.Error("the poison message was emitted")
				return nil
			}))
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(runCtx)
			require.NoError(t, err)
			assert.Equal(t, int64(1), src.Poisoned())
			require.Len(t, mem.Envelopes(), 1, "the poison message is in the dead-letter sink")
			assert.ErrorIs(t, mem.Envelopes()[0].Err, rabbitmq.ErrPoison)
			assert.Equal(t, 3, mem.Envelopes()[0].Attempts, "the calls of the earlier deliveries")
			retried, _ := a.depth(q + "_retry")
			assert.Zero(t, retried, "nothing in the retry queue")
		})
	}
}

// The poison guard does not dead-letter a good message that only shared a
// Batch with the poison one: a failed batch of several does not blame its
// messages (they are Failed, not Rejected), so neither is counted. The
// price, documented: a poison message that fails a batch of several is not
// caught by MaxDeliveries either.
func TestPoisonSparesItsBatchNeighbour(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: 2}
	a.declareQueue(q, nil)
	a.publish(q, "good", "poison")
	mem := deadletter.NewMemory(10)
	for run := 0; run < 5; run++ {
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		b := pipeline.New("batch", pipeline.WithDeadLetter(deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
			defer func() {
				if len(mem.Envelopes()) == 2 {
					src.Stop()
				}
			}()
			return mem.Write(ctx, env)
		})), pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.Fail
		}))
		pipeline.Sink(b, "store", pipeline.Batch(b, "batch", pipeline.Source(b, "consume", src), 2, 0),
			node.SinkFunc[[]rabbitmq.Message](func(_ context.Context, ms []rabbitmq.Message) error {
				for _, m := range ms {
					if m.MessageID == "poison" {
						return errBad
					}
				}
				return nil
			}))
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		t.Logf("run %d: %v", run, err)
		if err == nil {
			break
		}
	}
	var dead []string
	for _, env := range mem.Envelopes() {
		dead = append(dead, env.Item.(rabbitmq.Message).MessageID)
	}
	assert.Empty(t, dead, "no message of a failing batch of two is counted, the good one least of all")
}
