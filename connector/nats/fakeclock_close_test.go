package nats_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// With SourceConfig.Clock a fake clock (as the project's tests drive
// time), a run that a poison message fails under MaxDeliveries never
// returns: the acker waits on the fake clock for the stale pull request
// before it publishes the copy (session.acker, untilStale), and Close
// waits for the acker without a bound (session.close: <-s.ackerEnd).
// Nothing else in the run waits on that clock, so nothing advances it.
func TestFakeClockRunWithPoisonReturns(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "poison")
	cfg := a.config(name)
	cfg.MaxDeliveries = 3
	cfg.Clock = clockwork.NewFakeClock()
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	b := pipeline.New("fake", pipeline.WithDeadLetter(deadletter.NewMemory(10)), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
			return m, resilience.MarkPermanent(errPoisonous)
		}))
	pipeline.ForEach(b, "store", h, func(context.Context, nats.Message) error { return nil })
	p, err := b.Build()
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { _, err := p.Run(testContext(t)); ran <- err }()
	select {
	case err := <-ran:
		require.ErrorIs(t, err, errPoisonous)
	case <-time.After(15 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "connector/nats.(*session)") {
				t.Log(g)
			}
		}
		t.Fatal("Run did not return within 15 s of real time (PullWait is 1 s, the copy's timeout 5 s)")
	}
}

// Close waits for the counted copies still to publish at most
// CloseTimeout: after a run that a poison message failed, the copy waits
// for the pull request the source gave up (up to PullWait), and a Close
// past CloseTimeout gives it up; the failed run is then counted in
// process, so the guard still fires after MaxDeliveries failed runs.
func TestCloseTimeoutBoundsTheWaitForCopies(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "poison")
	const maxDeliveries = 3
	cfg := a.config(name)
	cfg.MaxDeliveries = maxDeliveries
	cfg.PullWait, cfg.CloseTimeout, cfg.AckWait = 5*time.Second, 300*time.Millisecond, 3*time.Second
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	dlq := deadletter.NewMemory(10)
	var failedAt atomic.Int64 // unix nanoseconds of the last failed call
	b := pipeline.New("closing", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
		*o = resilience.Options{}
		o.OnItemFailure = resilience.Fail
	}))
	h := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[nats.Message, nats.Message](func(_ context.Context, m nats.Message) (nats.Message, error) {
			failedAt.Store(time.Now().UnixNano())
			return m, resilience.MarkPermanent(errPoisonous)
		}))
	pipeline.ForEach(b, "store", h, func(context.Context, nats.Message) error { return nil })
	p, err := b.Build()
	require.NoError(t, err)
	failedRuns := 0
	for run := 1; run <= 2*maxDeliveries && dlq.Len() == 0; run++ {
		ctx, cancel := context.WithTimeout(testContext(t), 15*time.Second)
		_, err := p.Run(ctx)
		cancel()
		require.ErrorIs(t, err, errPoisonous, "run %d", run)
		failedRuns++
		// PullWait is 5 s: without the bound, Run returns about 5 s after
		// the failure.
		took := time.Since(time.Unix(0, failedAt.Load()))
		assert.Less(t, took, 3*time.Second, "run %d returned %s after the poison failed it", run, took)
	}
	assert.Equal(t, 1, dlq.Len(), "the poison message is dead-lettered")
	assert.Equal(t, maxDeliveries, failedRuns, "after MaxDeliveries failed runs")
}
