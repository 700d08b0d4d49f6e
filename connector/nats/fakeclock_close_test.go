package nats_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
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
	pipeline.SinkFunc(b, "store", h, func(context.Context, nats.Message) error { return nil })
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
