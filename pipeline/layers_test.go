package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

var errFlaky = resilience.MarkTransient(errors.New("flaky"))

// exact sets deterministic layers: no jitter, given retries.
func exact(retries int, b resilience.Backoff) func(*resilience.Options) {
	return func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = retries
		o.ItemRetry.Backoff = b.WithJitter(resilience.JitterNone)
		o.NodeRetry.MaxRetries = 0
	}
}

// stepRetries advances clock by exactly the delay of each retry the
// recorder reports, once the engine waits on the clock, until the run ends.
// It checks that nothing is called before the delay has fully passed.
func stepRetries(t *testing.T, clock *clockwork.FakeClock, rec *pipelinetest.Recorder, run *pipelinetest.Running, calls func() int) (pipeline.Result, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		select {
		case <-run.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	for n := 1; ; n++ {
		evs, err := pipelinetest.WaitFor[observer.RetryEvent](ctx, rec, n)
		if err != nil {
			return run.Wait()
		}
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		before := calls()
		d := evs[n-1].Delay
		if d > 0 {
			clock.Advance(d - time.Nanosecond)
			assert.Equal(t, before, calls(), "retry %d ran before its delay of %s passed", n, d)
			clock.Advance(time.Nanosecond)
		}
	}
}

func TestItemRetryWaitsExactlyAndSucceeds(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			rec := &pipelinetest.Recorder{}
			faults := pipelinetest.NewFaults(map[int][]error{7: {errFlaky, errFlaky, errFlaky}})
			b := pipeline.New("l1", append(m.opts, pipeline.WithClock(clock), pipeline.WithObserver(rec),
				pipeline.WithResilience(exact(3, resilience.Exponential(100*time.Millisecond))))...)
			src := pipelinetest.NewTrackedSource(ints(20)...)
			tr := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src), faults)
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", tr, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))
			res, err := stepRetries(t, clock, rec, run, func() int { return faults.Calls(7) })
			require.NoError(t, err)

			assert.Equal(t, ints(20), sink.Items())
			assert.Equal(t, 4, faults.Calls(7), "MaxRetries = 3 is 4 calls")
			retries := pipelinetest.Of[observer.RetryEvent](rec)
			require.Len(t, retries, 3)
			for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
				assert.Equal(t, resilience.ItemRetry, retries[i].Kind)
				assert.Equal(t, i+1, retries[i].Attempt)
				assert.Equal(t, want, retries[i].Delay)
				assert.ErrorIs(t, retries[i].Err, errFlaky)
				assert.Equal(t, "call", retries[i].Node)
				assert.Equal(t, res.RunID, retries[i].RunID)
			}
			assert.Empty(t, pipelinetest.Of[observer.RetryExhaustedEvent](rec))
			assert.Equal(t, int64(3), nodeOf(t, res, "call").ItemRetries)
			assert.Zero(t, nodeOf(t, res, "call").Failed)
			assert.Equal(t, repeat(node.Delivered, 20), once(t, src, 20))
		})
	}
}

func TestItemRetryExhaustedFailsTheNode(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	faults := pipelinetest.FailAlways(errFlaky, 2)
	b := pipeline.New("l1", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(exact(3, resilience.Constant(time.Second))))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)), faults)
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	run := pipelinetest.Start(t.Context(), build(t, b))
	res, err := stepRetries(t, clock, rec, run, func() int { return faults.Calls(2) })

	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "call", ne.Node)
	var re *resilience.RetryExhaustedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, resilience.ItemRetry, re.Kind)
	assert.Equal(t, 4, re.Attempts)
	assert.ErrorIs(t, err, errFlaky, "unwraps to the last attempt's error")
	assert.Equal(t, 4, faults.Calls(2))

	ex := pipelinetest.Of[observer.RetryExhaustedEvent](rec)
	require.Len(t, ex, 1)
	assert.Equal(t, 4, ex[0].Attempts)
	assert.Equal(t, resilience.ItemRetry, ex[0].Kind)
	assert.Equal(t, int64(1), nodeOf(t, res, "call").Failed)
	assert.Equal(t, int64(3), nodeOf(t, res, "call").ItemRetries)
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	errBad := errors.New("invalid card")
	faults := pipelinetest.FailAlways(errBad, 1)
	b := pipeline.New("perm")
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0, 1, 2)), faults)
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, errBad)
	assert.NotErrorIs(t, err, resilience.ErrRetryExhausted, "without retries the node fails with the error itself")
	assert.Equal(t, 1, faults.Calls(1))
}

type order struct {
	ID string
}

func (o order) CorrelationID() string { return "order-" + o.ID }

func TestSkipAndDeadLetter(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			rec := &pipelinetest.Recorder{}
			dlq := deadletter.NewMemory(10)
			errBad := errors.New("bad order")
			b := pipeline.New("actions", append(m.opts, pipeline.WithClock(clock), pipeline.WithObserver(rec),
				pipeline.WithDeadLetter(dlq), pipeline.WithResilience(exact(2, resilience.Constant(time.Second))))...)
			src := pipelinetest.NewTrackedSource(ints(10)...)
			ids := pipeline.Transform(b, "id", pipeline.Source[int](b, "src", src),
				node.TransformFunc[int, order](func(_ context.Context, x int) (order, error) { return order{fmt.Sprint(x)}, nil }))
			skip := pipeline.Transform(b, "skip", ids, pipelinetest.FailAlways(errBad, order{"3"}),
				pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
			dead := pipeline.Transform(b, "dead", skip, pipelinetest.FailAlways(errFlaky, order{"5"}),
				pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
			sink := &pipelinetest.Collector[order]{}
			pipeline.Sink(b, "sink", dead, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))
			res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
			require.NoError(t, err)

			assert.Len(t, sink.Items(), 8)
			outcomes := once(t, src, 10)
			assert.Equal(t, node.Skipped, outcomes[3])
			assert.Equal(t, node.DeadLettered, outcomes[5])
			assert.Equal(t, node.Delivered, outcomes[4])
			assert.Equal(t, int64(1), nodeOf(t, res, "skip").Skipped)
			assert.Equal(t, int64(1), nodeOf(t, res, "skip").Failed)
			assert.Equal(t, int64(1), nodeOf(t, res, "dead").DeadLettered)
			assert.Equal(t, int64(2), nodeOf(t, res, "dead").ItemRetries)

			drops := pipelinetest.Of[observer.DropEvent](rec)
			require.Len(t, drops, 1)
			assert.Equal(t, "skip", drops[0].Node)
			assert.ErrorIs(t, drops[0].Err, errBad)
			assert.Equal(t, 1, drops[0].Attempts, "a permanent error is called once")

			dls := pipelinetest.Of[observer.DeadLetterEvent](rec)
			require.Len(t, dls, 1)
			assert.Equal(t, "dead", dls[0].OriginNode)
			assert.Equal(t, 3, dls[0].Attempts)

			envs := dlq.Envelopes()
			require.Len(t, envs, 1)
			env := envs[0]
			assert.Equal(t, order{"5"}, env.Item)
			assert.Equal(t, "dead", env.OriginNode)
			assert.Equal(t, "dead", env.DecisionNode)
			assert.Equal(t, "actions", env.Pipeline)
			assert.Equal(t, res.RunID, env.RunID)
			assert.Equal(t, "order-5", env.CorrelationID)
			assert.Equal(t, 3, env.Attempts)
			assert.ErrorIs(t, env.Err, resilience.ErrRetryExhausted)
			assert.ErrorIs(t, env.Err, errFlaky)
			assert.Equal(t, env.Err.Error(), env.ErrText)
			require.Len(t, env.History, 3)
			for i, h := range env.History {
				assert.Equal(t, resilience.ItemRetry, h.Layer)
				assert.Equal(t, i, h.Retry, "retry number of call %d", i+1)
				assert.Equal(t, "flaky", h.Err)
			}
			assert.Equal(t, time.Second, env.History[0].Delay, "the wait chosen after the first call")
			assert.Equal(t, time.Duration(0), env.History[2].Delay, "no wait after the last call")
			assert.False(t, env.FirstFailure.Before(start))
			assert.Equal(t, 2*time.Second, env.LastFailure.Sub(env.FirstFailure))
		})
	}
}

func TestParallelRetriesDoNotStallOtherWorkers(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	faults := pipelinetest.NewFaults(map[int][]error{0: {errFlaky}})
	var after atomic.Int64 // calls of items other than 0 while 0 waits
	tr := node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if x != 0 {
			after.Add(1)
		}
		return faults.Process(ctx, x)
	})
	b := pipeline.New("parallel-retry", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1),
		pipeline.WithResilience(exact(1, resilience.Constant(time.Hour))))
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(40)...)), tr, pipeline.Parallel(4))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	// Item 0 waits an hour for its retry; the three other workers go on
	// with their items meanwhile (their queues are small, so they stop
	// after a few).
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	for after.Load() < 3 {
		// Wait for the other workers without sleeping: each of them calls
		// its first item independently of item 0.
		select {
		case <-run.Done():
			t.Fatal("run ended early")
		default:
		}
		runtimeGosched()
	}
	assert.Empty(t, sink.Items(), "ordered output waits for item 0")
	clock.Advance(time.Hour)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, ints(40), sink.Items(), "order is kept")
	assert.Equal(t, 2, faults.Calls(0))
}

func TestNodeRestartResumesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			rec := &pipelinetest.Recorder{}
			log := &eventLog{}
			errDown := errors.New("connection lost")
			faults := pipelinetest.NewFaults(map[int][]error{6: {errDown}})
			b := pipeline.New("l2", append(m.opts, pipeline.WithClock(clock), pipeline.WithObserver(rec),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.NodeRestart.MaxRestarts = 2
					o.NodeRestart.Backoff = resilience.Constant(time.Second)
				}))...)
			src := pipelinetest.NewTrackedSource(ints(20)...)
			tr := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", src),
				&restartable{lifecycle: lifecycle{"call", log, nil}, f: faults})
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", tr, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))

			evs, err := pipelinetest.WaitFor[observer.RetryEvent](t.Context(), rec, 1)
			require.NoError(t, err)
			assert.Equal(t, resilience.NodeRestart, evs[0].Kind)
			assert.Equal(t, 1, evs[0].Attempt)
			assert.Equal(t, time.Second, evs[0].Delay)
			assert.ErrorIs(t, evs[0].Err, errDown)
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			clock.Advance(time.Second - time.Nanosecond)
			assert.Equal(t, 1, faults.Calls(6), "no call before the restart's backoff passed")
			clock.Advance(time.Nanosecond)
			res, err := run.Wait()
			require.NoError(t, err)

			assert.Equal(t, ints(20), sink.Items(), "every item exactly once, in order")
			assert.Equal(t, 2, faults.Calls(6), "the failed item is replayed once")
			assert.Equal(t, 1, faults.Calls(5), "items before the checkpoint are not replayed")
			assert.Equal(t, int64(1), nodeOf(t, res, "call").NodeRestarts)
			assert.Equal(t, []string{"call.open", "call.close", "call.open", "call.close"}, log.all(),
				"a restart closes the node and opens it again")
			assert.Equal(t, repeat(node.Delivered, 20), once(t, src, 20))
		})
	}
}

type restartable struct {
	lifecycle
	f *pipelinetest.Faults[int]
}

func (r *restartable) Process(ctx context.Context, x int) (int, error) { return r.f.Process(ctx, x) }

func TestNodeRestartsExhausted(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	faults := pipelinetest.FailAlways(errFlaky, 3)
	b := pipeline.New("l2", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
			o.ItemRetry.Backoff = resilience.NoBackoff()
			o.NodeRestart.MaxRestarts = 2
			o.NodeRestart.Backoff = resilience.Constant(time.Minute)
		}))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(5)...)), faults)
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	run := pipelinetest.Start(t.Context(), build(t, b))
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Minute)
	var re *resilience.RetryExhaustedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, resilience.NodeRestart, re.Kind, "the outermost layer that gave up")
	assert.Equal(t, 3, re.Attempts)
	var inner *resilience.RetryExhaustedError
	require.ErrorAs(t, re.Err, &inner)
	assert.Equal(t, resilience.ItemRetry, inner.Kind)
	assert.Equal(t, 6, faults.Calls(3), "2 calls per cycle × 3 cycles: L1 inside L2")
	assert.Equal(t, int64(2), nodeOf(t, res, "call").NodeRestarts)
	assert.Equal(t, int64(3), nodeOf(t, res, "call").ItemRetries)
	kinds := []resilience.RetryKind{}
	for _, e := range pipelinetest.Of[observer.RetryExhaustedEvent](rec) {
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []resilience.RetryKind{resilience.ItemRetry, resilience.ItemRetry, resilience.ItemRetry, resilience.NodeRestart}, kinds)
}

func TestTooManyRepeatsFailTheNode(t *testing.T) {
	t.Parallel()
	faults := pipelinetest.FailAlways(errFlaky, 0)
	b := pipeline.New("repeats", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 60
		o.ItemRetry.Backoff = resilience.NoBackoff()
		o.NodeRestart.MaxRestarts = 5
		o.NodeRestart.Backoff = resilience.NoBackoff()
	}))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0)), faults)
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, pipeline.ErrTooManyRepeats)
	assert.Equal(t, resilience.MaxRepeats+1, faults.Calls(0))
}

func TestReplayWindowBoundsWhatANodeHolds(t *testing.T) {
	t.Parallel()
	for _, window := range []int{3, 100} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			busy, most := 0, 0
			gate := make(chan struct{})
			started := make(chan struct{}, 100)
			tr := node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
				mu.Lock()
				busy++
				most = max(most, busy)
				mu.Unlock()
				started <- struct{}{}
				<-gate
				mu.Lock()
				busy--
				mu.Unlock()
				return x, nil
			})
			b := pipeline.New("window", pipeline.WithHandOverBatch(1), pipeline.WithResilience(func(o *resilience.Options) {
				o.NodeRestart.MaxRestarts = 1
				o.NodeRestart.MaxReplayWindow = window
			}))
			out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(30)...)), tr, pipeline.Parallel(4))
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			run := pipelinetest.Start(t.Context(), build(t, b))
			want := min(window, 4)
			for range want {
				<-started
			}
			close(gate)
			_, err := run.Wait()
			require.NoError(t, err)
			assert.Equal(t, want, most, "items in flight at once")
		})
	}
}

func TestSourceRestartRunsItAgain(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var runs atomic.Int32
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		from := 0
		if runs.Add(1) > 1 {
			from = 5 // a broker redelivers what was not acked
		}
		for i := from; i < 10; i++ {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			if i == 4 && from == 0 {
				return errors.New("connection lost")
			}
		}
		return nil
	})
	b := pipeline.New("src-restart", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 1
		o.NodeRestart.Backoff = resilience.Constant(time.Second)
	}))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	require.NoError(t, err)
	assert.Equal(t, ints(10), sink.Items())
	assert.Equal(t, int32(2), runs.Load())
	assert.Equal(t, int64(1), nodeOf(t, res, "src").NodeRestarts)
}

func TestSinkRestartDeliversOnce(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	faults := pipelinetest.NewFaults(map[int][]error{5: {errors.New("disk full")}})
	sink := &faultySink{lifecycle: lifecycle{"sink", log, nil}, f: faults}
	b := pipeline.New("sink-restart", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.NodeRestart.MaxRestarts = 1
		o.NodeRestart.Backoff = resilience.NoBackoff()
	}))
	pipeline.Sink[int](b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)), sink)
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, ints(10), sink.written())
	// Flushed before the restart closes it, so that what it took is kept.
	assert.Equal(t, []string{"sink.open", "sink.flush", "sink.close", "sink.open", "sink.flush", "sink.close"}, log.all())
}

type faultySink struct {
	lifecycle
	f   *pipelinetest.Faults[int]
	mu  sync.Mutex
	got []int
}

func (s *faultySink) Write(ctx context.Context, x int) error {
	if _, err := s.f.Process(ctx, x); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, x)
	return nil
}

func (s *faultySink) written() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.got...)
}

func TestNodeRetryRunsASourceThatEmittedNothing(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	var runs atomic.Int32
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if runs.Add(1) == 1 {
			return fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
		}
		return out.Emit(ctx, 1)
	})
	b := pipeline.New("l3", pipeline.WithClock(clock), pipeline.WithObserver(rec), pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRetry.MaxRetries = 2
		o.NodeRetry.Backoff = resilience.Constant(5 * time.Second)
	}))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), sink)
	run := pipelinetest.Start(t.Context(), build(t, b))
	evs, err := pipelinetest.WaitFor[observer.RetryEvent](t.Context(), rec, 1)
	require.NoError(t, err)
	assert.Equal(t, resilience.NodeRetry, evs[0].Kind)
	assert.Equal(t, 5*time.Second, evs[0].Delay)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(5 * time.Second)
	res, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, []int{1}, sink.Items())
	assert.Equal(t, int64(1), nodeOf(t, res, "src").NodeRetries)
}

func TestNodeRetryDoesNotRunASourceThatEmitted(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		runs.Add(1)
		if err := out.Emit(ctx, 1); err != nil {
			return err
		}
		return syscall.ECONNRESET
	})
	b := pipeline.New("l3", pipeline.WithResilience(func(o *resilience.Options) { o.NodeRetry.MaxRetries = 3 }))
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, syscall.ECONNRESET)
	assert.Equal(t, int32(1), runs.Load(), "a source that emitted is not run again by node retry")
}

func TestNodeRetryOfAFailedOpen(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	var opens atomic.Int32
	tr := &flakyOpen{lifecycle: lifecycle{"call", log, nil}, opens: &opens}
	b := pipeline.New("l3-open", pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRetry.MaxRetries = 1
		o.NodeRetry.Backoff = resilience.NoBackoff()
	}))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2)), tr)
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, sink.Items())
	assert.Equal(t, int32(2), opens.Load())
	assert.Equal(t, int64(1), nodeOf(t, res, "call").NodeRetries)
	assert.Equal(t, []string{"call.close"}, log.all(), "Close only for the Open that succeeded")
}

type flakyOpen struct {
	lifecycle
	opens *atomic.Int32
}

func (f *flakyOpen) Open(context.Context) error {
	if f.opens.Add(1) == 1 {
		return syscall.ETIMEDOUT
	}
	return nil
}

func (f *flakyOpen) Process(_ context.Context, x int) (int, error) { return x, nil }

func TestCancellationEndsAWaitAtOnce(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	dlq := deadletter.NewMemory(10)
	ctx, cancel := context.WithCancel(t.Context())
	b := pipeline.New("cancel-wait", pipeline.WithClock(clock), pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 5
			o.ItemRetry.Backoff = resilience.Constant(time.Hour)
			o.OnItemFailure = resilience.DeadLetter
		}))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), pipelinetest.FailAlways(errFlaky, 1))
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	run := pipelinetest.Start(ctx, build(t, b))
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	cancel()
	res, err := run.Wait()
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, nodeOf(t, res, "call").Failed, "a cancellation is not counted")
	assert.Zero(t, nodeOf(t, res, "call").DeadLettered)
	assert.Zero(t, dlq.Len(), "a cancellation is never dead-lettered")
	assert.Zero(t, nodeOf(t, res, "call").ItemRetries, "the retry whose wait the cancellation cut off was not made")
}

func TestDeadLetterSinkFailureFailsTheRunWithBothErrors(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad item")
	var writes atomic.Int32
	dlq := deadletter.Func(func(context.Context, deadletter.Envelope) error {
		writes.Add(1)
		return deadletter.ErrFull
	})
	b := pipeline.New("dlq-fails", pipeline.WithDeadLetter(dlq), pipeline.WithDeadLetterRetry(2, resilience.NoBackoff()),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.NodeRestart.MaxRestarts = 3 // a dead-letter failure is not restarted
		}))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)), pipelinetest.FailAlways(errBad, 1))
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	res, err := build(t, b).Run(t.Context())
	require.ErrorIs(t, err, errBad)
	require.ErrorIs(t, err, deadletter.ErrFull)
	assert.Contains(t, err.Error(), "dead-letter sink failed")
	assert.Equal(t, int32(3), writes.Load(), "the write and 2 retries")
	assert.Zero(t, nodeOf(t, res, "call").NodeRestarts)
}

type panicky struct{ observer.Nop }

func (panicky) OnRetry(observer.RetryEvent) { panic("metrics exploded") }

func TestObserverPanicFailsTheRun(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad-observer", pipeline.WithObserver(panicky{}),
		pipeline.WithResilience(exact(2, resilience.NoBackoff())))
	tr := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(1)),
		pipelinetest.NewFaults(map[int][]error{1: {errFlaky}}))
	pipeline.Sink(b, "sink", tr, &pipelinetest.Collector[int]{})
	_, err := build(t, b).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "call", ne.Node)
	assert.Contains(t, err.Error(), "observer panicked on observer.RetryEvent", "the error names the event")
	var pe *resilience.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "metrics exploded", pe.Value)
}
