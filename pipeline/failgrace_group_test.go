package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// failOn returns a source that emits nothing and fails once fire is closed.
func failOn(fire <-chan struct{}) node.Source[int] {
	return node.SourceFunc[int](func(ctx context.Context, _ node.Emitter[int]) error {
		select {
		case <-fire:
			return errors.New("the failing source failed")
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// A call waiting for its RateLimit token is not a call of user code
// in flight, yet the wait runs on the calls' context, which a failure does
// not end: the run does not stop until the grace period passes (on a fake
// clock nobody advances: never), and when the token comes within the
// grace, the sink's Write is called AFTER the run failed: a new write, not
// one in flight.
func TestRateLimitWaitDoesNotOutliveFailure(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	fire := make(chan struct{})
	var mu sync.Mutex
	var writes []string
	failed := make(chan struct{})
	b := pipeline.New("ratelimit-grace", pipeline.WithClock(clock), pipeline.WithDrainTimeout(time.Minute))
	src := pipelinetest.NewTrackedSource(1, 2)
	pipeline.ForEach(b, "slow", pipeline.Source(b, "src", src), func(ctx context.Context, v int) error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-failed:
			writes = append(writes, fmt.Sprintf("%d after the failure", v))
		default:
			writes = append(writes, fmt.Sprint(v))
		}
		return nil
	}, pipeline.RateLimit(0.1, 1)) // one token per 10 s
	pipeline.ForEach(b, "bystander", pipeline.Source(b, "failing", failOn(fire)), func(context.Context, int) error { return nil })
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// Item 1 took the token; item 2 waits 10 s on the clock for its own.
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	close(failed)
	close(fire)
	done := make(chan struct{})
	go func() { _, _ = run.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// Let the token come, within the grace period.
		clock.Advance(10 * time.Second)
		<-done
		t.Errorf("Run did not return after the failure while no user call was running")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, writes, "2 after the failure", "a write started after the run failed")
}

// A worker that fails a Parallel (or Keyed) node for good stops the run
// taking in items at once, while a sibling's call still runs within its
// grace period: another branch's source has its context ended before the
// sibling's call returns, and before the clock moves at all.
func TestGroupWorkerFailureStopsIntakeAtOnce(t *testing.T) {
	t.Parallel()
	for _, opt := range []struct {
		name string
		o    pipeline.NodeOption
	}{
		{"parallel", pipeline.Parallel(2)},
		{"keyed", pipeline.Keyed(2, func(s string) string { return s })},
	} {
		t.Run(opt.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			slowStarted, slowReturned, steadyStopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
			b := pipeline.New("group-fail", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.Fail
			}))
			// Another branch's source: its context is the run's intake.
			steady := node.SourceFunc[int](func(ctx context.Context, _ node.Emitter[int]) error {
				<-ctx.Done()
				close(steadyStopped)
				return ctx.Err()
			})
			pipeline.ForEach(b, "other", pipeline.Source(b, "steady", steady), func(context.Context, int) error { return nil })
			items := node.SourceFunc[string](func(ctx context.Context, out node.Emitter[string]) error {
				if err := out.Emit(ctx, "slow"); err != nil {
					return err
				}
				<-slowStarted
				if err := out.Emit(ctx, "poison"); err != nil {
					return err
				}
				<-ctx.Done()
				return ctx.Err()
			})
			pipeline.ForEach(b, "par", pipeline.Source(b, "items", items), func(ctx context.Context, s string) error {
				if s == "poison" {
					return resilience.MarkPermanent(errors.New("poison"))
				}
				defer close(slowReturned)
				close(slowStarted)
				<-ctx.Done() // ends with the grace period
				return ctx.Err()
			}, opt.o)
			run := pipelinetest.Start(t.Context(), build(t, b))
			select {
			case <-steadyStopped:
			case <-time.After(5 * time.Second): // a bound on a hang, not a wait
				t.Error("the run kept taking in items while the failed node's sibling call ran")
			}
			select {
			case <-slowReturned:
				t.Error("the sibling's call ended before its grace period")
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			_, err := pipelinetest.AdvanceUntilDone(ctx, clock, run, time.Second)
			require.Error(t, err)
			assert.ErrorContains(t, err, "poison")
		})
	}
}

// A Parallel sink whose worker fails the node
// under node restart, while a sibling's write is in flight: the sibling's
// write finishes within the grace, is Delivered, and the restart does not
// write it again.
func TestParallelRestartDoesNotRewriteSiblingsWrite(t *testing.T) {
	t.Parallel()
	for range 5 {
		release, poisoned, started := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var goodWrites, poisonCalls atomic.Int64
		clock := clockwork.NewFakeClock()
		b := pipeline.New("parallel-restart", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.Backoff = resilience.NoBackoff()
			o.NodeRestart.MaxReplayWindow = 16
		}))
		src := pipelinetest.NewTrackedSource("good", "poison")
		pipeline.ForEach(b, "par", pipeline.Source(b, "src", src), func(ctx context.Context, s string) error {
			if s == "poison" {
				if poisonCalls.Add(1) == 1 {
					<-started // the good item's write is in flight
					close(poisoned)
				}
				return resilience.MarkPermanent(errors.New("poison"))
			}
			if goodWrites.Add(1) == 1 {
				close(started)
				<-release // committed only once the poison failed the node
			}
			return nil
		}, pipeline.Parallel(2))
		run := pipelinetest.Start(t.Context(), build(t, b))
		<-poisoned
		// The failure armed the grace period for the call in flight.
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		close(release)
		_, err := run.Wait()
		require.Error(t, err)
		assert.Equal(t, int64(1), goodWrites.Load(), "the good item is written once")
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[0])
		assert.Equal(t, []node.Outcome{node.Rejected}, src.Outcomes()[1])
	}
}

// A Keyed transform whose worker fails the run under Fail while another
// worker's call is in flight: the failure stops the run handing items on
// at once, so the call that finishes within the grace may or may not hand
// its item on; either way, nothing written ends Failed, nothing unwritten
// Delivered.
func TestKeyedSiblingFinishedInGraceIsDelivered(t *testing.T) {
	t.Parallel()
	for range 5 {
		release, poisoned, started := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		written := map[string]bool{}
		clock := clockwork.NewFakeClock()
		b := pipeline.New("keyed-grace", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
		}))
		src := pipelinetest.NewTrackedSource("good", "poison")
		mapped := pipeline.Map(b, "k", pipeline.Source(b, "src", src), func(ctx context.Context, s string) (string, error) {
			if s == "poison" {
				<-started // the good item's call is in flight
				close(poisoned)
				return s, resilience.MarkPermanent(errors.New("poison"))
			}
			close(started)
			<-release
			return s, nil
		}, pipeline.Keyed(4, func(s string) string { return s }))
		pipeline.ForEach(b, "w", mapped, func(ctx context.Context, s string) error {
			mu.Lock()
			written[s] = true
			mu.Unlock()
			return nil
		})
		run := pipelinetest.Start(t.Context(), build(t, b))
		<-poisoned
		// The failure armed the grace period for the call in flight.
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		close(release)
		_, err := run.Wait()
		require.Error(t, err)
		want := node.Failed
		if written["good"] {
			want = node.Delivered
		}
		assert.Equal(t, []node.Outcome{want}, src.Outcomes()[0])
	}
}
