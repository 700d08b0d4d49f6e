package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func breaker(when resilience.OpenAction, action resilience.FailureAction) func(*resilience.Options) {
	return func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.NodeRetry.MaxRetries = 0
		o.OnItemFailure = action
		o.CircuitBreaker.Enabled = true
		o.CircuitBreaker.ConsecutiveFailures = 3
		o.CircuitBreaker.OpenDuration = 10 * time.Second
		o.CircuitBreaker.WhenOpen = when
		o.CircuitBreaker.MaxPause = time.Minute
	}
}

func transitions(rec *pipelinetest.Recorder) [][2]resilience.CircuitState {
	var out [][2]resilience.CircuitState
	for _, e := range pipelinetest.Of[observer.CircuitEvent](rec) {
		out = append(out, [2]resilience.CircuitState{e.From, e.To})
	}
	return out
}

var (
	closedOpen = [2]resilience.CircuitState{resilience.CircuitClosed, resilience.CircuitOpen}
	openHalf   = [2]resilience.CircuitState{resilience.CircuitOpen, resilience.CircuitHalfOpen}
	halfClosed = [2]resilience.CircuitState{resilience.CircuitHalfOpen, resilience.CircuitClosed}
	halfOpen   = [2]resilience.CircuitState{resilience.CircuitHalfOpen, resilience.CircuitOpen}
)

func TestOpenBreakerFailsTheNodeEvenWhenSkipping(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	rec := &pipelinetest.Recorder{}
	var calls atomic.Int32
	down := node.TransformFunc[int, int](func(context.Context, int) (int, error) {
		calls.Add(1)
		return 0, errFlaky
	})
	b := pipeline.New("open-fail", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(breaker(resilience.OpenFail, resilience.Skip)))
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)), down)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p := build(t, b)
	res, err := p.Run(t.Context())

	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.Equal(t, "call", coe.Node)
	assert.Equal(t, clock.Now().Add(10*time.Second), coe.Until)
	assert.Equal(t, int32(3), calls.Load(), "three failures trip it; the fourth item is refused without a call")
	assert.Equal(t, int64(3), nodeOf(t, res, "call").Skipped)
	assert.Equal(t, [][2]resilience.CircuitState{closedOpen}, transitions(rec))
	assert.Equal(t, resilience.CircuitOpen, nodeOf(t, res, "call").Circuit)

	// The breaker keeps its state between runs: the next run is refused at
	// once, until the open duration has passed.
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, resilience.ErrCircuitOpen)
	assert.Equal(t, int32(3), calls.Load())
	s, _ := p.Stats().Node("call")
	assert.Equal(t, resilience.CircuitOpen, s.Circuit)
}

func TestOpenPauseResumesAfterTheOpenDuration(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			rec := &pipelinetest.Recorder{}
			var healthy atomic.Bool
			var calls atomic.Int32
			dep := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
				calls.Add(1)
				if !healthy.Load() {
					return 0, errFlaky
				}
				return x, nil
			})
			b := pipeline.New("open-pause", append(m.opts, pipeline.WithClock(clock), pipeline.WithObserver(rec),
				pipeline.WithResilience(breaker(resilience.OpenPause, resilience.Skip)))...)
			src := pipelinetest.NewTrackedSource(ints(10)...)
			out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", src), dep)
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, sink)
			run := pipelinetest.Start(t.Context(), build(t, b))

			// Items 0, 1, 2 fail and are skipped; the breaker opens and the
			// node pauses on the clock instead of calling.
			_, err := pipelinetest.WaitFor[observer.CircuitEvent](t.Context(), rec, 1)
			require.NoError(t, err)
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			assert.Equal(t, int32(3), calls.Load())
			healthy.Store(true)
			clock.Advance(10*time.Second - time.Nanosecond)
			assert.Equal(t, int32(3), calls.Load(), "no probe before the open duration passed")
			clock.Advance(time.Nanosecond)
			res, err := run.Wait()
			require.NoError(t, err)

			assert.Equal(t, []int{3, 4, 5, 6, 7, 8, 9}, sink.Items())
			assert.Equal(t, int64(3), nodeOf(t, res, "call").Skipped)
			assert.Equal(t, [][2]resilience.CircuitState{closedOpen, openHalf, halfClosed}, transitions(rec))
			outcomes := once(t, src, 10)
			assert.Equal(t, repeat(node.Skipped, 3), outcomes[:3])
			assert.Equal(t, repeat(node.Delivered, 7), outcomes[3:])
		})
	}
}

func TestOpenPauseProbesOncePerOpenDuration(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	rec := &pipelinetest.Recorder{}
	down := pipelinetest.FailAlways(errFlaky, ints(6)...)
	b := pipeline.New("probes", pipeline.WithClock(clock), pipeline.WithObserver(rec),
		pipeline.WithResilience(breaker(resilience.OpenPause, resilience.Skip)))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(6)...)), down)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	run := pipelinetest.Start(t.Context(), build(t, b))
	res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
	// Three failures trip the breaker and their items are skipped. Item 3
	// then waits for each probe and makes it, one call per open period; a
	// failed probe spends none of its retries, so it is not skipped but
	// waits on, until MaxPause (a minute) after its first refusal has
	// passed: then the node fails, with items 4 and 5 never called.
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	for i := range 3 {
		assert.Equal(t, 1, down.Calls(i), "item %d", i)
	}
	assert.Equal(t, 6, down.Calls(3), "a probe at 10, 20, 30, 40, 50 and 60 s")
	assert.Zero(t, down.Calls(4))
	assert.Equal(t, int64(3), nodeOf(t, res, "call").Skipped)
	// The node failed a minute after the start; the run's end may come
	// later on the clock, which the test moves while the run winds down.
	failedAt := time.Time{}
	for _, e := range pipelinetest.Of[observer.NodeEvent](rec) {
		if e.Node == "call" && e.Err != nil {
			failedAt = e.Time
		}
	}
	assert.Equal(t, time.Minute, failedAt.Sub(start))
	want := [][2]resilience.CircuitState{closedOpen}
	for range 6 {
		want = append(want, openHalf, halfOpen)
	}
	assert.Equal(t, want, transitions(rec))
}

func TestOpenPauseEndsAtMaxPause(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	rec := &pipelinetest.Recorder{}
	probing := make(chan struct{})
	var probes atomic.Int32
	// Every call before the open duration passed fails: three failures
	// trip the breaker. Which calls those are is the workers' race: one
	// worker's next call may start while the other's third failure is
	// not recorded yet, under a permit of the closed breaker; it fails
	// too, and the breaker opens once. So the calls are told apart by the
	// clock, not counted: the first call once the open duration passed,
	// the probe, hangs on the clock far longer than MaxPause, so the other
	// worker's pause runs out.
	dep := node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if clock.Since(start) < 10*time.Second {
			return 0, errFlaky
		}
		if probes.Add(1) > 1 {
			return 0, errFlaky // a second probe: counted, and asserted below
		}
		close(probing)
		select {
		case <-clock.After(time.Hour):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return x, nil
	})
	b := pipeline.New("max-pause", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithObserver(rec),
		pipeline.WithResilience(func(o *resilience.Options) {
			breaker(resilience.OpenPause, resilience.Skip)(o)
			o.CircuitBreaker.MaxPause = 15 * time.Second
		}))
	out := pipeline.Transform(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(20)...)), dep,
		pipeline.Parallel(2), pipeline.Unordered())
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	run := pipelinetest.Start(t.Context(), build(t, b))
	// The breaker opens, and both workers pause on the clock: until the
	// clock moves nothing else waits on it (the calls fail at once, and
	// there are no retries), and one pause arms one timer.
	_, err := pipelinetest.WaitFor[observer.CircuitEvent](t.Context(), rec, 1)
	require.NoError(t, err)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
	clock.Advance(10 * time.Second)
	<-probing
	// The probe waits an hour; the other worker, refused while the probe
	// holds the half-open breaker's one slot, waits for its deadline, 5s
	// later (MaxPause after its first refusal).
	require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
	clock.Advance(5 * time.Second)
	// The node fails; the probe, a call in flight, has the grace period
	// to end before its context is cancelled: its timer and the probe's
	// wait on the clock.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 2))
	clock.Advance(pipeline.DefaultFailGrace)
	_, err = run.Wait()
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.Equal(t, "call", coe.Node)
	assert.Equal(t, int32(1), probes.Load(), "one probe, which held the half-open breaker to the end")
	assert.Equal(t, [][2]resilience.CircuitState{closedOpen, openHalf}, transitions(rec))
	// The node failed MaxPause after the first refusal and ended once the
	// probe's grace period had passed.
	endedAt := time.Time{}
	for _, e := range pipelinetest.Of[observer.NodeEvent](rec) {
		if e.Node == "call" && e.Err != nil && !e.Stopped {
			endedAt = e.Time
		}
	}
	assert.Equal(t, 15*time.Second+pipeline.DefaultFailGrace, endedAt.Sub(start))
}

func TestBreakerCountsOnlyTransientFailures(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad input")
	b := pipeline.New("permanent", pipeline.WithResilience(breaker(resilience.OpenFail, resilience.Skip)))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(10)...)),
		pipelinetest.FailAlways(errBad, 0, 1, 2, 3, 4, 5))
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	res, err := build(t, b).Run(t.Context())
	require.NoError(t, err, "permanent errors say nothing of the dependency's health")
	assert.Equal(t, int64(6), nodeOf(t, res, "call").Skipped)
	assert.Equal(t, resilience.CircuitClosed, nodeOf(t, res, "call").Circuit)
}

// A pausing breaker probes a paused item once per OpenDuration, and a
// failed probe spends no retry; so Build refuses a MaxPause whose probes
// would pass the repeat cap, Plan counts them in calls/item, and an item
// is never called more often than Plan says.
func TestPauseProbesStayWithinTheRepeatCapAndPlan(t *testing.T) {
	t.Parallel()
	pausing := func(maxPause time.Duration) func(*resilience.Options) {
		return func(o *resilience.Options) {
			breaker(resilience.OpenPause, resilience.Skip)(o)
			o.CircuitBreaker.ConsecutiveFailures = 1
			o.CircuitBreaker.OpenDuration = time.Second
			o.CircuitBreaker.MaxPause = maxPause
		}
	}
	b := pipeline.New("too-many-probes", pipeline.WithResilience(pausing(10*time.Minute)))
	pipeline.Sink(b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0)), &pipelinetest.Collector[int]{})
	_, err := b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	assert.ErrorContains(t, err, `node "call": resilience: CircuitBreaker.MaxPause = 10m0s`)
	assert.ErrorContains(t, err, "probed 601 times")

	clock := clockwork.NewFakeClock()
	down := pipelinetest.FailAlways(errFlaky, 0, 1)
	b = pipeline.New("probes", pipeline.WithClock(clock), pipeline.WithResilience(pausing(time.Minute)))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", pipelinetest.NewSliceSource(0, 1)), down)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p := build(t, b)
	plan := p.Plan().Nodes[1]
	assert.Equal(t, 62, plan.ItemCalls, "1 call and 61 probes in a minute's pause")
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), p), time.Second)
	// Item 0 trips the breaker and is skipped; item 1 pauses, probing once
	// a second, until a minute after its first refusal.
	var coe *resilience.CircuitOpenError
	require.ErrorAs(t, err, &coe)
	assert.NotErrorIs(t, err, pipeline.ErrTooManyRepeats)
	assert.Equal(t, 1, down.Calls(0))
	assert.LessOrEqual(t, down.Calls(1), plan.ItemCalls)
	assert.GreaterOrEqual(t, down.Calls(1), 60, "it probed through the pause")
}
