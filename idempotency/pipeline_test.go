package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
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

// retryBusy arms the item retry of a node so that a Busy key is tried
// again each second of the pipeline's clock.
func retryBusy(o *resilience.Options) {
	o.ItemRetry.MaxRetries = 20
	o.ItemRetry.Backoff = resilience.Constant(time.Second)
}

// A sink node fed a duplicate while the first copy is being written: the
// duplicate's claim is Busy, the item retry waits, and the retry finds the
// key Completed and skips it. Each key is written once, and every item is
// Delivered.
func TestPipelineBusyRetryCompleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	entered, proceed := make(chan struct{}), make(chan struct{})
	rec := &recorder{hook: func(_ context.Context, item string) error {
		if item == "a" {
			select {
			case <-entered: // the first copy blocks, not a later one
			default:
				close(entered)
				<-proceed
			}
		}
		return nil
	}}
	g := guard(rec, idempotency.NewMemory(), clock)
	src := pipelinetest.NewTrackedSource("a", "a", "b")
	b := pipeline.New("orders", pipeline.WithClock(clock))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", src), node.Sink[string](g),
		pipeline.Parallel(2), pipeline.NodeResilience(retryBusy))
	p, err := b.Build()
	require.NoError(t, err)

	run := pipelinetest.Start(ctx, p)
	<-entered
	waitUntil(t, func() bool { return g.Stats().Busy == 1 })
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the duplicate waits for its retry")
	close(proceed)
	// Both keys are written before the clock moves: "a" once proceed is
	// closed, and "b" by the worker the parked duplicate left free (waiting
	// for a single write would let "b" stand for "a", and the retry could
	// find "a" still busy).
	waitUntil(t, func() bool { return g.Stats().Written == 2 })
	res, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, time.Second)
	require.NoError(t, err)

	assert.ElementsMatch(t, []string{"a", "b"}, rec.items(), "each key written once")
	assert.Equal(t, idempotency.Stats{Written: 2, Duplicates: 1, Busy: 1}, g.Stats())
	store, ok := res.Node("store")
	require.True(t, ok)
	assert.Equal(t, int64(1), store.ItemRetries)
	assert.Equal(t, int64(0), store.Failed)
	for i, o := range src.Outcomes() {
		assert.Equal(t, []node.Outcome{node.Delivered}, o, "item %d", i)
	}
}

// Two consumers of a source that delivers every message to both (a broker
// redelivering to competing consumers, at its worst), each with a guard of
// its own over one store: every key is written once in all.
func TestPipelineTwoConsumersWriteEachKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	store := idempotency.NewMemory()
	var calls atomic.Int64
	rec := &recorder{}
	var items []string
	for i := range 200 {
		items = append(items, fmt.Sprintf("order-%d", i%50)) // each key four times
	}
	var guards []*idempotency.Guard[string]
	var runs []*pipelinetest.Running
	for c := range 2 {
		g := guard(rec, store, clock)
		guards = append(guards, g)
		b := pipeline.New(fmt.Sprintf("consumer-%d", c), pipeline.WithClock(clock))
		pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(items...)), counted(g, &calls),
			pipeline.Parallel(4), pipeline.Unordered(), pipeline.NodeResilience(retryBusy))
		p, err := b.Build()
		require.NoError(t, err)
		runs = append(runs, pipelinetest.Start(ctx, p))
	}
	advanceUntilAllDone(t, clock, &calls, runs...)
	for _, r := range runs {
		_, err := r.Wait()
		require.NoError(t, err)
	}

	written := rec.items()
	assert.Len(t, written, 50, "each key written once")
	assert.ElementsMatch(t, items[:50], written)
	var total idempotency.Stats
	for _, g := range guards {
		s := g.Stats()
		total.Written += s.Written
		total.Duplicates += s.Duplicates
	}
	assert.Equal(t, int64(50), total.Written)
	assert.Equal(t, int64(2*len(items)-50), total.Duplicates, "every other delivery was absorbed")
}

// counted returns a sink that writes through sink and counts in calls the
// writes in progress.
func counted(sink node.Sink[string], calls *atomic.Int64) node.Sink[string] {
	return node.SinkFunc[string](func(ctx context.Context, item string) error {
		calls.Add(1)
		defer calls.Add(-1)
		return sink.Write(ctx, item)
	})
}

// advanceUntilAllDone moves clock a second forward each time something
// waits on it and no write is in progress, until every run returned.
// Waiting for the writes keeps fake time from running ahead of one (a
// goroutine the scheduler leaves aside for a while), which would let the
// item retries of its duplicates run out, or its lease.
func advanceUntilAllDone(t *testing.T, clock *clockwork.FakeClock, calls *atomic.Int64, runs ...*pipelinetest.Running) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := make(chan struct{})
	go func() {
		defer close(all)
		for _, r := range runs {
			<-r.Done()
		}
	}()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-all:
			stop()
		case <-wctx.Done():
		}
	}()
	for {
		if err := clock.BlockUntilContext(wctx, 1); err != nil {
			select {
			case <-all:
				return
			default:
				t.Fatalf("runs not done: %v", err)
			}
		}
		waitUntil(t, func() bool { return calls.Load() == 0 })
		clock.Advance(time.Second)
	}
}

// closeOnly is a sink with Close but no Open: a write after its Close is
// an error, as it would be for a real sink whose connection Close released.
type closeOnly struct {
	closes atomic.Int64
	writes atomic.Int64
	fail   atomic.Bool // the next write fails permanently, once
}

func (s *closeOnly) Write(context.Context, string) error {
	if s.closes.Load() > 0 {
		return fmt.Errorf("write after Close")
	}
	if s.fail.CompareAndSwap(true, false) {
		return resilience.MarkPermanent(fmt.Errorf("broken"))
	}
	s.writes.Add(1)
	return nil
}

func (s *closeOnly) Close(context.Context) error { s.closes.Add(1); return nil }

// A node restart of the sink node does not close a wrapped sink that has
// no Open: the guard is a node.Wrapper, and the engine asks the wrapped
// sink. It is closed once, at the end of the run.
func TestPipelineRestartKeepsAWrappedSinkWithoutOpen(t *testing.T) {
	t.Parallel()
	for range 20 {
		clock := clockwork.NewFakeClockAt(epoch)
		inner := &closeOnly{}
		inner.fail.Store(true)
		b := pipeline.New("restart", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.Backoff = resilience.Constant(time.Second)
		}))
		src := pipeline.Source[string](b, "src", pipelinetest.NewSliceSource("a", "b", "c"))
		pipeline.Sink(b, "write", src, idempotency.Sink[string](inner, idempotency.NewMemory(),
			func(s string) string { return s }, idempotency.WithClock(clock)))
		p, err := b.Build()
		require.NoError(t, err)
		res, err := pipelinetest.AdvanceUntilDone(context.Background(), clock, pipelinetest.Start(context.Background(), p), time.Second)
		require.NoError(t, err)
		write, ok := res.Node("write")
		require.True(t, ok)
		assert.Equal(t, int64(1), write.NodeRestarts)
		assert.Equal(t, int64(3), inner.writes.Load())
		assert.Equal(t, int64(1), inner.closes.Load(), "closed once, at the end")
	}
}
