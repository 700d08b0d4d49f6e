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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// REVIEW: a call waiting for its RateLimit token is not a call of user code
// in flight, yet the wait runs on the calls' context, which a failure does
// not end: the run does not stop until the grace period passes (on a fake
// clock nobody advances: never), and when the token comes within the
// grace, the sink's Write is called AFTER the run failed: a new write, not
// one in flight.
func TestReviewRateLimitWaitOutlivesFailure(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	fire := make(chan struct{})
	var mu sync.Mutex
	var writes []string
	failed := make(chan struct{})
	b := pipeline.New("ratelimit-grace", pipeline.WithClock(clock), pipeline.WithDrainTimeout(time.Minute))
	src := pipelinetest.NewTrackedSource(1, 2)
	pipeline.SinkFunc(b, "slow", pipeline.Source(b, "src", src), func(ctx context.Context, v int) error {
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
	pipeline.SinkFunc(b, "bystander", pipeline.Source(b, "failing", failOn(fire)), func(context.Context, int) error { return nil })
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

// REVIEW: within a Parallel node, a worker that fails the node under Fail
// does not fail the run until every sibling's call has ended, up to the
// group's grace period: meanwhile the run goes on taking in items (other
// sources emit, other branches write), contrary to "a failure stops the
// run taking in items at once". Then the run's own grace period starts
// only then: a call elsewhere that was running when the poison failed
// gets two grace periods.
func TestReviewParallelFailureStopsIntakeLate(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	var written atomic.Int64
	slowStarted := make(chan struct{})
	b := pipeline.New("parallel-grace", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.Fail
	}))
	// A steady source on another branch: its writes are the run's intake.
	steady := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := 0; ; i++ {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	})
	pipeline.SinkFunc(b, "other", pipeline.Source(b, "steady", steady), func(context.Context, int) error {
		written.Add(1)
		return nil
	})
	// "slow" blocks on its context; "poison" fails the node at once.
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
	pipeline.SinkFunc(b, "par", pipeline.Source(b, "items", items), func(ctx context.Context, s string) error {
		if s == "poison" {
			return resilience.MarkPermanent(errors.New("poison"))
		}
		close(slowStarted)
		<-ctx.Done()
		return ctx.Err()
	}, pipeline.Parallel(2))
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	<-slowStarted
	// The poison has failed the node within a few ms; the run must stop
	// taking in items now.
	time.Sleep(300 * time.Millisecond)
	at := written.Load()
	time.Sleep(300 * time.Millisecond)
	after := written.Load()
	clock.Advance(pipeline.DefaultFailGrace)
	_, err := run.Wait()
	require.Error(t, err)
	assert.Equal(t, at, after, "the other branch kept writing after the poison failed the node (%d, then %d)", at, after)
}

// Probe (held if it passes): a Parallel sink whose worker fails the node
// under node restart, while a sibling's write is in flight: the sibling's
// write finishes within the grace, is Delivered, and the restart does not
// write it again.
func TestReviewParallelRestartDoesNotRewriteSiblingsWrite(t *testing.T) {
	t.Parallel()
	for range 5 {
		release, poisoned, started := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var goodWrites, poisonCalls atomic.Int64
		b := pipeline.New("parallel-restart", pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.Fail
			o.NodeRestart.MaxRestarts = 1
			o.NodeRestart.Backoff = resilience.NoBackoff()
			o.NodeRestart.MaxReplayWindow = 16
		}))
		src := pipelinetest.NewTrackedSource("good", "poison")
		pipeline.SinkFunc(b, "par", pipeline.Source(b, "src", src), func(ctx context.Context, s string) error {
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
		time.Sleep(50 * time.Millisecond)
		close(release)
		_, err := run.Wait()
		require.Error(t, err)
		assert.Equal(t, int64(1), goodWrites.Load(), "the good item is written once")
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[0])
		assert.Equal(t, []node.Outcome{node.Rejected}, src.Outcomes()[1])
	}
}

// Probe (held if it passes): a Keyed transform whose worker fails the run
// under Fail while another worker's call is in flight: the call that
// finishes within the grace hands its item on, the sink writes it, and it
// is Delivered; nothing written ends Failed, nothing unwritten Delivered.
func TestReviewKeyedSiblingFinishedInGraceIsDelivered(t *testing.T) {
	t.Parallel()
	for range 5 {
		release, poisoned, started := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		written := map[string]bool{}
		b := pipeline.New("keyed-grace", pipeline.WithResilience(func(o *resilience.Options) {
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
		pipeline.SinkFunc(b, "w", mapped, func(ctx context.Context, s string) error {
			mu.Lock()
			written[s] = true
			mu.Unlock()
			return nil
		})
		run := pipelinetest.Start(t.Context(), build(t, b))
		<-poisoned
		time.Sleep(50 * time.Millisecond)
		close(release)
		_, err := run.Wait()
		require.Error(t, err)
		want := node.Failed
		if written["good"] {
			want = node.Delivered
		}
		assert.True(t, written["good"], "the finished call's item reached the sink")
		assert.Equal(t, []node.Outcome{want}, src.Outcomes()[0])
	}
}
