package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An item that fails its node every time, until NodeRestart.MaxElapsed
// refuses the next restart, failed the run: it ends Rejected, as when
// MaxRestarts is spent, so that a broker source counts it toward its dead
// letter. It ended Failed, and a poison message crashed the node on every
// delivery without end (a review's finding).
func TestRestartRefusedForItsElapsedRejectsTheItem(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"sink", "parallel", "keyed"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			src := newOutcomeSource(3)
			b := pipeline.New("restart-elapsed", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.OnItemFailure = resilience.Fail
					o.NodeRestart.MaxRestarts = 3
					o.NodeRestart.Backoff = resilience.Constant(time.Hour)
					o.NodeRestart.MaxElapsed = 90 * time.Minute
				}))
			var opts []pipeline.NodeOption
			switch shape {
			case "parallel":
				opts = append(opts, pipeline.Parallel(2))
			case "keyed":
				opts = append(opts, pipeline.Keyed(2, func(x int) int { return x }))
			}
			pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), node.SinkFunc[int](func(_ context.Context, x int) error {
				if x == 1 {
					return errRestartFlaky // on every call: a poison item
				}
				return nil
			}), opts...)
			run := pipelinetest.Start(t.Context(), build(t, b))
			<-src.emitted
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1)) // the first restart's wait
			clock.Advance(time.Hour)                                    // restart 1; item 1 fails again; restart 2 would start past 90m
			res, err := waitRun(t, run, "elapsed")
			require.Error(t, err)
			require.ErrorIs(t, err, errRestartFlaky)
			var re *resilience.RetryExhaustedError
			require.True(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, resilience.LimitElapsed, re.Limit)
			assert.Equal(t, int64(1), nodeOf(t, res, "sink").NodeRestarts)
			outs := src.outs()
			assert.Equal(t, []node.Outcome{node.Rejected}, outs[1], "the poison item")
			for _, i := range []int{0, 2} {
				// Delivered, or Failed when the node failed before it ended.
				assert.NotContains(t, outs[i], node.Rejected, "item %d did nothing wrong", i)
			}
		})
	}
}

// A panic in the restart backoff is the policy's fault, not the item's:
// the item that failed the node ends Failed.
func TestPanickingRestartBackoffDoesNotRejectTheItem(t *testing.T) {
	t.Parallel()
	src := newOutcomeSource(1)
	b := pipeline.New("restart-backoff-panics", pipeline.WithClock(clockwork.NewFakeClock()),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Fail
			o.NodeRestart.MaxRestarts = 3
			o.NodeRestart.Backoff = resilience.Custom(func(int) time.Duration { panic("backoff") })
		}))
	pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), node.SinkFunc[int](func(context.Context, int) error {
		return errRestartFlaky
	}))
	_, err := pipelinetest.Start(t.Context(), build(t, b)).Wait()
	require.Error(t, err)
	var pe *resilience.PanicError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.Equal(t, []node.Outcome{node.Failed}, src.outs()[0])
}

// A poison item that spent the shared retry budget itself, delivery after
// delivery, ends Rejected each time, so that a broker source counts it
// toward MaxDeliveries and its dead letter: a budget refusal does not
// excuse the item (excusing it, as a change once did, made such a message
// loop for ever: a second review's finding).
func TestPoisonItemThatSpentTheBudgetStillEndsRejected(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	// Shared across runs, as documented; about one retry per window.
	budget := resilience.NewBudget(resilience.BudgetOptions{Ratio: 0.1, MinPerSecond: 0.1, Window: 10 * time.Second, Clock: clock})
	refused := 0
	for delivery := range 6 { // the broker delivers it again after each failed run
		src := newOutcomeSource(1)
		b := pipeline.New("poison-budget", pipeline.WithClock(clock),
			pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 3
				o.ItemRetry.Backoff = resilience.NoBackoff()
				o.OnItemFailure = resilience.Fail
				o.RetryBudget = budget
			}))
		pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), node.SinkFunc[int](func(context.Context, int) error {
			return errRestartFlaky // poison: fails every call of every delivery
		}))
		_, err := pipelinetest.Start(t.Context(), build(t, b)).Wait()
		require.Error(t, err, "delivery %d", delivery)
		if errors.Is(err, resilience.ErrBudgetExhausted) {
			refused++
		}
		assert.Equal(t, []node.Outcome{node.Rejected}, src.outs()[0], "delivery %d", delivery)
	}
	assert.Positive(t, refused, "the budget refused some delivery's retries")
}

var errResetBad = errors.New("bad row")

// ResetAfterItems counts the items that left the node without failing
// it, whatever their outcome: skipped and dead-lettered items count as
// delivered ones do (the node went on), as docs/resilience-layers.md says.
func TestResetAfterItemsCountsSkippedItems(t *testing.T) {
	t.Parallel()
	for _, skipped := range []bool{false, true} {
		src := pipelinetest.NewTrackedSource(0, 1, 2, 3)
		b := pipeline.New("reset-after", pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.Fail
			o.FailureRules = []resilience.FailureRule{{Match: func(err error) bool { return errors.Is(err, errResetBad) }, Action: resilience.Skip}}
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.MaxReplayWindow = 10
			o.NodeRestart.Backoff = resilience.NoBackoff()
			o.NodeRestart.ResetAfterItems = 2
		}))
		var mu sync.Mutex
		calls := map[int]int{}
		pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, x int) error {
			mu.Lock()
			defer mu.Unlock()
			calls[x]++
			switch {
			case skipped && (x == 1 || x == 2):
				return errResetBad // skipped: the node goes on
			case (x == 0 || x == 3) && calls[x] == 1:
				return errRestartFlaky // fails the node once
			}
			return nil
		}))
		res, err := build(t, b).Run(t.Context())
		require.NoError(t, err, "skipped %v: items 1 and 2 left the node between its failures", skipped)
		assert.Equal(t, int64(2), nodeOf(t, res, "sink").NodeRestarts)
	}
}
