package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A sink that writes a row's parts concurrently (an errgroup) and reports
// every part's error gets, for a poison row, the row's own permanent error
// joined with its sibling part's context.Canceled: that is the row's fault,
// so it ends Rejected each run, and a broker source counts it towards
// MaxDeliveries.
func TestPoisonJoinedWithASiblingsCancellationIsRejected(t *testing.T) {
	t.Parallel()
	errBadRow := resilience.MarkPermanent(errors.New("bad row: column 3 is not a number"))
	write := func(ctx context.Context, v int) error {
		g, gctx := errgroup.WithContext(ctx)
		var errs [2]error
		g.Go(func() error { errs[0] = errBadRow; return errs[0] }) // the poison part
		g.Go(func() error {                                        // its sibling part, cancelled by the poison
			<-gctx.Done()
			errs[1] = gctx.Err()
			return errs[1]
		})
		_ = g.Wait()
		return errors.Join(errs[:]...)
	}
	for run := range 3 {
		b := pipeline.New("poison-cancel", pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
		}))
		src := pipelinetest.NewTrackedSource(1)
		pipeline.ForEach(b, "write", pipeline.Source(b, "read", src), write)
		_, err := build(t, b).Run(t.Context())
		require.ErrorIs(t, err, errBadRow)
		assert.Equal(t, []node.Outcome{node.Rejected}, src.Outcomes()[0], "run %d: the poison row's own error failed the run", run)
	}
}

// The guard keeps the claim of a write whose context ended
// (AttemptTimeout) until the lease ends (DefaultLease 30 s). The busy error
// it gives the item's own retries asks them to wait for the lease, so a
// good item whose first write timed out (and did not happen) is written by
// its retry, not dead-lettered as "key claimed by another owner".
func TestGuardedWriteThatTimedOutIsWrittenByItsRetryAfterTheLease(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	var calls, wrote atomic.Int64
	inner := node.SinkFunc[int](func(ctx context.Context, v int) error {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the database is slow once: nothing is written
			return ctx.Err()
		}
		wrote.Add(1)
		return nil
	})
	guard := idempotency.Sink[int](inner, idempotency.NewMemory(), func(v int) string { return "k" }, idempotency.WithClock(clock))
	b := pipeline.New("guard-timeout", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.ItemRetry.AttemptTimeout = time.Second
			o.OnItemFailure = resilience.DeadLetter
		}))
	src := pipelinetest.NewTrackedSource(1)
	pipeline.Sink(b, "write", pipeline.Source(b, "read", src), guard)
	run := pipelinetest.Start(t.Context(), build(t, b))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, 100*time.Millisecond)
	require.NoError(t, err)
	st := guard.Stats()
	for _, env := range dlq.Envelopes() {
		t.Logf("dead letter: %s", env.ErrText)
	}
	assert.Equal(t, int64(1), wrote.Load(), "the item's retry writes it (guard stats %+v, calls %d)", st, calls.Load())
	assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[0])
}

// guardBusyRun runs one item, from src, through a guarded sink whose first
// write times out (nothing written) while the item's retries, capped at
// 1 s, all fall within the claim's 30 s lease: the item exhausts its
// retries on a busy key, which is not its fault.
func guardBusyRun(t *testing.T, src *pipelinetest.SliceSource[int]) (*deadletter.Memory, int64) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	var calls, wrote atomic.Int64
	inner := node.SinkFunc[int](func(ctx context.Context, v int) error {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		wrote.Add(1)
		return nil
	})
	guard := idempotency.Sink[int](inner, idempotency.NewMemory(), func(v int) string { return "k" }, idempotency.WithClock(clock))
	b := pipeline.New("guard-busy", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 2
			o.ItemRetry.Backoff = resilience.Constant(time.Second)
			o.ItemRetry.Backoff.MaxDelay = time.Second // caps the lease's RetryAfter
			o.ItemRetry.AttemptTimeout = time.Second
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.Sink(b, "write", pipeline.Source(b, "read", src), guard)
	run := pipelinetest.Start(t.Context(), build(t, b))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, 100*time.Millisecond)
	require.NoError(t, err)
	return dlq, wrote.Load()
}

// An item whose retries run out on a busy key under DeadLetter is not
// dead-lettered when its source takes it back: it ends Failed, which a
// broker source redelivers without counting it against the message.
func TestBusyKeyExhaustedUnderDeadLetterEndsFailedForATrackedItem(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource(1)
	dlq, wrote := guardBusyRun(t, src)
	assert.Empty(t, dlq.Envelopes(), "a good item is not dead-lettered for a busy key")
	assert.Equal(t, int64(0), wrote)
	assert.Equal(t, []node.Outcome{node.Failed}, src.Outcomes()[0])
}

// An untracked item has no source to take it back: it is dead-lettered,
// so that it is not lost.
func TestBusyKeyExhaustedUnderDeadLetterDeadLettersAnUntrackedItem(t *testing.T) {
	t.Parallel()
	dlq, wrote := guardBusyRun(t, pipelinetest.NewSliceSource(1))
	require.Len(t, dlq.Envelopes(), 1)
	assert.ErrorIs(t, dlq.Envelopes()[0].Err, idempotency.ErrInProgress)
	assert.Equal(t, int64(0), wrote)
}
