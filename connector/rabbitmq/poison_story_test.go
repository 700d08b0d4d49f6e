package rabbitmq_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// The poison envelope tells why each run failed: a message that fails
// three runs, each in a new Source (a new process, as far as the story
// goes: it travels in the copies' headers), at the node "handle", with an
// error, then a panic, then an error, is dead-lettered with the node that
// failed as OriginNode, one attempt per delivery that failed, and a
// history entry per failed run with its node, its error or panic text
// and its time.
func TestPoisonEnvelopeTellsEachFailedRun(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	ctx := testContext(t)
	q := uniqueName(t)
	a.cleanup([]string{q})
	const maxDeliveries = 3
	cfg := rabbitmq.SourceConfig{URL: a.url, Queue: q, Declare: &rabbitmq.QueueDeclaration{}, MaxDeliveries: maxDeliveries}
	first, err := rabbitmq.NewSource(cfg)
	require.NoError(t, err)
	first.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	require.NoError(t, first.Open(ctx))
	require.NoError(t, first.Close(ctx))
	a.publish(q, "poison", "fine")

	dlq := deadletter.NewMemory(10)
	var (
		mu      sync.Mutex
		calls   int
		written []string
	)
	failedRuns := 0
	done := func() bool { return len(dlq.Envelopes()) == 1 && len(written) > 0 }
	for run := 1; run <= 2*maxDeliveries; run++ {
		// The third failed run dead-letters the poison as it ends: no run
		// is left to make once "fine" is written.
		mu.Lock()
		ended := done()
		mu.Unlock()
		if ended {
			break
		}
		src, err := rabbitmq.NewSource(cfg)
		require.NoError(t, err)
		b := pipeline.New("story", pipeline.WithDeadLetter(deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
			err := dlq.Write(ctx, env)
			mu.Lock()
			defer mu.Unlock()
			if done() {
				src.Stop()
			}
			return err
		})), pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.Fail
		}))
		h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
			node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
				if m.MessageID != "poison" {
					return m, nil
				}
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if n == 2 {
					panic("nil map")
				}
				return m, resilience.MarkPermanent(errBad)
			}))
		pipeline.ForEach(b, "store", h, func(_ context.Context, m rabbitmq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			written = append(written, m.MessageID)
			if done() {
				src.Stop()
			}
			return nil
		})
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(ctx)
		if err == nil {
			break
		}
		failedRuns++
	}
	assert.Equal(t, maxDeliveries, failedRuns)
	require.Len(t, dlq.Envelopes(), 1)
	env := dlq.Envelopes()[0]
	assert.ErrorIs(t, env.Err, rabbitmq.ErrPoison)
	assert.Equal(t, "handle", env.OriginNode, "the node that failed")
	assert.Equal(t, "consume", env.DecisionNode, "the source stopped it")
	assert.Equal(t, maxDeliveries, env.Attempts, "one call in each delivery that failed a run")
	require.Len(t, env.History, maxDeliveries, "one entry per failed run")
	for i, h := range env.History {
		assert.Equal(t, "handle", h.Node, "run %d", i+1)
		assert.False(t, h.Time.IsZero(), "run %d", i+1)
	}
	assert.Contains(t, env.History[0].Err, errBad.Error())
	assert.Contains(t, env.History[1].Err, "nil map", "the panic's text")
	assert.Contains(t, env.History[2].Err, errBad.Error())
	assert.Equal(t, env.History[0].Time, env.FirstFailure)
	assert.Equal(t, env.History[2].Time, env.LastFailure)
	assert.False(t, env.History[2].Time.Before(env.History[0].Time))
}
