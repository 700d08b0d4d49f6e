package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// outcomes records the outcome of each tracked item by its value.
type outcomes struct {
	mu sync.Mutex
	of map[string]node.Outcome
}

func (o *outcomes) done(item string) func(node.Outcome) {
	return func(out node.Outcome) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.of == nil {
			o.of = map[string]node.Outcome{}
		}
		o.of[item] = out
	}
}

func (o *outcomes) get(item string) node.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.of[item]
}

// failingRun builds a run in which a poison item fails the node "handle"
// while the sink "write" is in the middle of writing the good item "good":
// the source emits "good", waits until its write started, emits "poison",
// and then waits for its context to end (the run failed). writing is
// closed when the write of "good" started; stopped, when the source saw
// the run stop. The sink is write.
func failingRun(t *testing.T, write func(ctx context.Context, item string) error, par int, opts ...pipeline.Option) (p *pipeline.Pipeline, got *outcomes, writing, stopped chan struct{}) {
	t.Helper()
	got = &outcomes{}
	writing, stopped = make(chan struct{}), make(chan struct{})
	b := pipeline.New("failgrace", append([]pipeline.Option{pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Fail
	})}, opts...)...)
	src := pipeline.Source(b, "read", node.SourceFunc[string](func(ctx context.Context, out node.Emitter[string]) error {
		if err := out.EmitTracked(ctx, "good", got.done("good")); err != nil {
			return err
		}
		select {
		case <-writing:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := out.EmitTracked(ctx, "poison", got.done("poison")); err != nil {
			return err
		}
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}))
	handled := pipeline.Transform(b, "handle", src, node.TransformFunc[string, string](func(_ context.Context, s string) (string, error) {
		if s == "poison" {
			return s, resilience.MarkPermanent(errors.New("unparseable"))
		}
		return s, nil
	}))
	var once sync.Once
	pipeline.Sink(b, "write", handled, node.SinkFunc[string](func(ctx context.Context, s string) error {
		once.Do(func() { close(writing) })
		return write(ctx, s)
	}), pipeline.Parallel(par))
	return build(t, b), got, writing, stopped
}

// A poison item that fails the run no longer cancels a write already
// running: the write of a good item goes on to its end, and the item gets
// its real outcome, Delivered, so that a broker source acks it. Before,
// the write's context was cancelled with the run's: a sink that had
// committed got context.Canceled back, the item ended Failed, and the
// broker delivered it again (a duplicate row per write in flight).
func TestFailureLetsCallsInFlightFinish(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 4} {
		t.Run(fmt.Sprintf("par=%d", par), func(t *testing.T) {
			t.Parallel()
			commit := make(chan struct{})
			var sawCancel bool
			write := func(ctx context.Context, s string) error {
				select {
				case <-commit:
					return nil
				case <-ctx.Done():
					sawCancel = true
					return ctx.Err()
				}
			}
			p, got, _, stopped := failingRun(t, write, par)
			done := make(chan error, 1)
			go func() {
				_, err := p.Run(t.Context())
				done <- err
			}()
			<-stopped // the poison failed the run: intake stopped
			close(commit)
			err := <-done
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "handle", ne.Node, "Run returns the first failure")
			assert.False(t, sawCancel, "the write in flight was not cancelled")
			assert.Equal(t, node.Delivered, got.get("good"), "the write that finished is Delivered")
			assert.Equal(t, node.Rejected, got.get("poison"))
		})
	}
}

// A write that does not end by itself after the run failed is cancelled
// once the grace period passes (DefaultFailGrace on the pipeline's clock,
// or WithDrainTimeout's when set); its item ends Failed and Run returns.
func TestFailureGraceEndsCallsThatDoNotFinish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace time.Duration
		opts  []pipeline.Option
	}{
		{"default", pipeline.DefaultFailGrace, nil},
		{"drain timeout", 3 * time.Second, []pipeline.Option{pipeline.WithDrainTimeout(3 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			var cause error
			write := func(ctx context.Context, s string) error {
				<-ctx.Done()
				cause = context.Cause(ctx)
				return ctx.Err()
			}
			p, got, _, stopped := failingRun(t, write, 1, append(tc.opts, pipeline.WithClock(clock))...)
			done := make(chan error, 1)
			go func() {
				_, err := p.Run(t.Context())
				done <- err
			}()
			<-stopped
			wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, clock.BlockUntilContext(wctx, 1), "the grace timer is armed")
			clock.Advance(tc.grace - time.Nanosecond)
			select {
			case err := <-done:
				require.FailNow(t, "Run returned before the grace period ended", "%v", err)
			default:
			}
			clock.Advance(time.Nanosecond)
			err := <-done
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "handle", ne.Node)
			require.ErrorAs(t, cause, &ne, "the call's context ends with the run's failure as its cause")
			assert.Equal(t, node.Failed, got.get("good"))
		})
	}
}

// Cancelling the caller's context still stops every call at once, a run
// that failed included: the grace period is for a failure, not for the
// caller.
func TestCallerCancelStopsCallsInFlightAtOnce(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	write := func(ctx context.Context, s string) error {
		<-ctx.Done()
		return ctx.Err()
	}
	p, got, _, stopped := failingRun(t, write, 1, pipeline.WithClock(clock))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(ctx)
		done <- err
	}()
	<-stopped
	cancel() // the clock never moves: only the caller's cancel ends the write
	<-done
	assert.Equal(t, node.Failed, got.get("good"))
}

// probedSource emits its items, each tracked, then returns (or, with
// hold, waits for its context to end). Its Close, which the run calls
// once every node has ended, records whether anything was waiting on the
// pipeline's clock then.
type probedSource struct {
	clock   *clockwork.FakeClock
	items   []string
	got     *outcomes
	before  func(item string) // called before emitting item, when set
	hold    bool
	waiting bool
}

func (s *probedSource) Open(context.Context) error { return nil }

func (s *probedSource) Run(ctx context.Context, out node.Emitter[string]) error {
	for _, it := range s.items {
		if s.before != nil {
			s.before(it)
		}
		if err := out.EmitTracked(ctx, it, s.got.done(it)); err != nil {
			return err
		}
	}
	if s.hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *probedSource) Close(context.Context) error {
	s.waiting = clockWaits(s.clock)
	return nil
}

// clockWaits reports, without blocking, whether a timer or anything else
// waits on clock.
func clockWaits(clock *clockwork.FakeClock) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return clock.BlockUntilContext(ctx, 1) == nil
}

// The grace period of a failure is for calls of user code that run when
// the run fails: with none running, or once the last of them returned,
// nothing waits for it. Before, the failure armed its timer (10 s on the
// pipeline's clock) whatever ran, and the timer stayed until Run
// returned: the run's wind-down waited on the clock with nothing to wait
// for, and a test driver that moves a fake clock while something waits
// on it (pipelinetest.AdvanceUntilDone) moved it the whole grace period
// at the end of every failed run (TestPlanAllTimeCoversPausesInEveryRestartCycle
// measured 1m40s for a run of 1m30s).
func TestFailureGraceWaitsOnlyWhileCallsRun(t *testing.T) {
	t.Parallel()
	for _, par := range []int{1, 4} {
		t.Run(fmt.Sprintf("no call running/par=%d", par), func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			got := &outcomes{}
			src := &probedSource{clock: clock, items: []string{"poison"}, got: got}
			b := pipeline.New("failgrace", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.Fail
			}))
			handled := pipeline.Transform(b, "handle", pipeline.Source[string](b, "read", src),
				node.TransformFunc[string, string](func(_ context.Context, s string) (string, error) {
					return s, resilience.MarkPermanent(errors.New("unparseable"))
				}), pipeline.Parallel(par))
			pipeline.Sink(b, "write", handled, node.SinkFunc[string](func(context.Context, string) error { return nil }))
			res, err := build(t, b).Run(t.Context())
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "handle", ne.Node)
			assert.False(t, src.waiting, "nothing waits on the clock once the failed run's nodes ended")
			assert.Zero(t, res.Duration, "the clock did not have to move")
		})
		t.Run(fmt.Sprintf("a write ran and returned/par=%d", par), func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			got := &outcomes{}
			writing, commit := make(chan struct{}), make(chan struct{})
			src := &probedSource{clock: clock, items: []string{"good", "poison"}, got: got, hold: true,
				before: func(item string) {
					if item == "poison" {
						<-writing
					}
				}}
			b := pipeline.New("failgrace", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 0
				o.OnItemFailure = resilience.Fail
			}))
			handled := pipeline.Transform(b, "handle", pipeline.Source[string](b, "read", src),
				node.TransformFunc[string, string](func(_ context.Context, s string) (string, error) {
					if s == "poison" {
						return s, resilience.MarkPermanent(errors.New("unparseable"))
					}
					return s, nil
				}))
			pipeline.Sink(b, "write", handled, node.SinkFunc[string](func(context.Context, string) error {
				close(writing)
				<-commit // ends only when the test says: the grace period is not over
				return nil
			}), pipeline.Parallel(par))
			done := make(chan error, 1)
			go func() {
				_, err := build(t, b).Run(t.Context())
				done <- err
			}()
			wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			require.NoError(t, clock.BlockUntilContext(wctx, 1), "the grace timer is armed while the write runs")
			close(commit)
			err := <-done
			var ne *pipeline.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "handle", ne.Node)
			assert.Equal(t, node.Delivered, got.get("good"), "the write that finished is Delivered")
			assert.False(t, src.waiting, "once the write returned, nothing waits on the clock")
		})
	}
}
