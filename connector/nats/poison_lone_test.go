package nats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A poison message with 0, 1 or 10 neighbours, under the default Batch,
// a Batch of 1 and a Batch of exactly the backlog, with OnItemFailure =
// Fail and Run called again after each failed run: exactly MaxDeliveries
// runs fail, the transform sees the poison at each of them (and counts
// only what it saw), then the poison message alone is dead-lettered,
// once, and every neighbour is written and none dead-lettered.
func TestLonePoisonIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, neighbours := range []int{0, 1, 10} {
		for _, batch := range []int{0, 1, neighbours + 1} {
			t.Run(fmt.Sprintf("neighbours%d/batch%d", neighbours, batch), func(t *testing.T) {
				t.Parallel()
				lonePoison(t, neighbours, batch)
			})
		}
	}
}

func lonePoison(t *testing.T, neighbours, batch int) {
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	good := ids(neighbours)
	a.publish(subject, append([]string{"poison"}, good...)...)

	const maxDeliveries = 3
	cfg := a.config(name)
	cfg.MaxDeliveries = maxDeliveries
	cfg.Batch = batch
	// A short AckWait: server 2.9 can still send a message into a pull
	// request the source gave up on (docs/nats.md, "Pulling"); that message
	// comes back after AckWait, which must end well within the test's
	// deadline.
	cfg.AckWait = 3 * time.Second
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		written  = map[string]int{}
		dead     []deadletter.Envelope
		poisoned []int // the attempt number the transform saw, per call
	)
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, env)
		return nil
	})
	b := pipeline.New("lone", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	handled := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
			if string(m.Data) == "poison" {
				mu.Lock()
				poisoned = append(poisoned, m.Deliveries)
				mu.Unlock()
				return m, resilience.MarkPermanent(errPoisonous)
			}
			return m, nil
		}))
	pipeline.ForEach(b, "store", handled, func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		written[string(m.Data)]++
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)

	ctx := testContext(t)
	failedRuns := 0
	for run := 1; run <= 2*maxDeliveries+2; run++ {
		runCtx, cancel := context.WithCancel(ctx)
		// The run that dead-letters the poison has nothing left to fail
		// on: drain it once every message is written or dead-lettered.
		// (Not cancel it too: a run cancelled before its drain ended
		// returns context.Canceled, as one did under load.)
		go func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				mu.Lock()
				all := len(written) == neighbours && len(dead) == 1
				mu.Unlock()
				if all {
					p.Drain()
					return
				}
			}
		}()
		_, err := p.Run(runCtx)
		cancel()
		mu.Lock()
		all := len(written) == neighbours && len(dead) == 1
		mu.Unlock()
		if err != nil {
			// The run the poison fails a MaxDeliveries-th time
			// dead-letters it as it ends.
			if !assert.ErrorIs(t, err, errPoisonous, "run %d fails only because of the poison message", run) {
				mu.Lock()
				t.Logf("poison seen at %v; %d written, %d dead", poisoned, len(written), len(dead))
				mu.Unlock()
				info := a.consumer(name, name)
				t.Logf("consumer: pending %d, ack pending %d, redelivered %d, waiting %d", info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
				t.FailNow()
			}
			failedRuns++
		}
		if err == nil || all {
			break
		}
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, maxDeliveries, failedRuns, "each of the poison's first MaxDeliveries deliveries failed one run")
	assert.Equal(t, []int{1, 2, 3}, poisoned, "the transform saw the poison at deliveries 1, 2 and 3, then no more")
	require.Len(t, dead, 1, "the poison message alone is dead-lettered, once")
	m, ok := dead[0].Item.(nats.Message)
	require.True(t, ok)
	assert.Equal(t, "poison", string(m.Data))
	assert.ErrorIs(t, dead[0].Err, nats.ErrPoison)
	// The envelope tells each failed run: its node, its error, its time.
	env := dead[0]
	assert.Equal(t, "handle", env.OriginNode, "the node that failed")
	assert.Equal(t, "consume", env.DecisionNode, "the source stopped it")
	assert.Equal(t, len(poisoned), env.Attempts, "one call per delivery that failed a run")
	if assert.Len(t, env.History, len(poisoned)) {
		for i, h := range env.History {
			assert.Equal(t, "handle", h.Node, "run %d", i+1)
			assert.Contains(t, h.Err, errPoisonous.Error(), "run %d", i+1)
		}
		assert.Equal(t, env.History[0].Time, env.FirstFailure)
		assert.Equal(t, env.History[len(env.History)-1].Time, env.LastFailure)
		assert.False(t, env.FirstFailure.IsZero())
	}
	assert.Len(t, written, neighbours, "every neighbour is written")
	for body, n := range written {
		assert.Equal(t, 1, n, "%s written once", body)
	}
	info := a.consumerAfterAcks(name, name)
	assert.Zero(t, info.NumPending, "nothing left to deliver")
	assert.Zero(t, info.NumAckPending, "nothing delivered and not acked")
}
