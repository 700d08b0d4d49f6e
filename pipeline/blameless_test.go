package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An item that fails its node under Fail with an error that is not its
// fault ends Failed, not Rejected, so that a broker source does not count
// the run against it as a poison message: a busy idempotency key (a dead
// consumer's claim), a cancellation the item did not cause, an error the
// sink marks blameless. An error of the item's own still makes it
// Rejected. Before, every one of them was Rejected, and a good message
// whose key was busy was dead-lettered as poison after MaxDeliveries runs.
func TestFailureThatIsNotTheItemsFaultIsNotRejected(t *testing.T) {
	t.Parallel()
	busy := func(t *testing.T, clock clockwork.Clock) node.Sink[int] {
		store := idempotency.NewMemory()
		_, err := store.Claim(t.Context(), "1", "dead consumer", clock.Now(), time.Minute)
		require.NoError(t, err)
		return idempotency.Sink(node.SinkFunc[int](func(context.Context, int) error { return nil }), store,
			func(x int) string { return fmt.Sprint(x) }, idempotency.WithClock(clock))
	}
	failWith := func(err error) func(*testing.T, clockwork.Clock) node.Sink[int] {
		return func(*testing.T, clockwork.Clock) node.Sink[int] {
			return node.SinkFunc[int](func(context.Context, int) error { return err })
		}
	}
	for _, tc := range []struct {
		name    string
		sink    func(*testing.T, clockwork.Clock) node.Sink[int]
		retries int
		want    node.Outcome
	}{
		{"busy key", busy, 0, node.Failed},
		{"busy key after retries", busy, 2, node.Failed},
		{"cancelled, not by the run", failWith(fmt.Errorf("pool: %w", context.Canceled)), 0, node.Failed},
		{"marked blameless", failWith(resilience.MarkBlameless(errors.New("lock held"))), 0, node.Failed},
		{"the item's own error", failWith(resilience.MarkPermanent(errors.New("bad row"))), 0, node.Rejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			b := pipeline.New("blameless", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = tc.retries
				o.ItemRetry.Backoff = resilience.NoBackoff()
				o.OnItemFailure = resilience.Fail
			}))
			src := pipelinetest.NewTrackedSource(1)
			pipeline.Sink(b, "write", pipeline.Source[int](b, "read", src), tc.sink(t, clock))
			_, err := build(t, b).Run(t.Context())
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "write", ne.Node)
			assert.Equal(t, []node.Outcome{tc.want}, src.Outcomes()[0])
		})
	}
}
