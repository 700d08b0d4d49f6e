package pipeline_test

// Timers armed while the clock moves: Aggregate's time windows, Join's
// expiry and AttemptTimeout's deadline each read the clock, then arm a
// timer. When the clock moves between the two (another goroutine advances
// it), the timer must still fire at the instant computed from the
// reading, not that much later.

import (
	"context"
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

// An armMovingClock is a fake clock that, once told to, moves itself
// forward just before it arms its next timer: the clock moved after the
// reading the timer's duration was computed from, as another goroutine
// advancing it at that moment would move it.
//
// The test must not move the clock itself until the timer is armed again
// from the newer reading: a move of its own while the engine is between
// reading the clock and arming would be one more move while arming, which
// no timer taking a duration can see. rearmed is closed once the timer
// after the moved one is armed.
type armMovingClock struct {
	*clockwork.FakeClock
	by      atomic.Int64 // how far the next NewTimer moves the clock first, ns
	moved   atomic.Bool  // the clock moved at an arm; the next arm closes rearmed
	rearmed chan struct{}
}

func newArmMovingClock(at time.Time) *armMovingClock {
	return &armMovingClock{FakeClock: clockwork.NewFakeClockAt(at), rearmed: make(chan struct{})}
}

func (c *armMovingClock) moveAtNextArm(d time.Duration) { c.by.Store(int64(d)) }

func (c *armMovingClock) NewTimer(d time.Duration) clockwork.Timer {
	if by := c.by.Swap(0); by > 0 {
		c.Advance(time.Duration(by))
		defer c.moved.Store(true)
		return c.FakeClock.NewTimer(d)
	}
	t := c.FakeClock.NewTimer(d)
	if c.moved.CompareAndSwap(true, false) {
		close(c.rearmed)
	}
	return t
}

// waitRearmed waits until the timer armed while the clock moved has been
// armed again, and that timer is the clock's one waiter.
func (c *armMovingClock) waitRearmed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.rearmed:
	case <-time.After(armGuard):
		t.Fatalf("%s was not armed again after the clock moved while arming: it would fire late by the move", what)
	}
	require.NoError(t, c.BlockUntilContext(t.Context(), 1), what)
}

// armGuard bounds, on the real clock, a wait for something that the fake
// clock's last move should have caused: it fails the test instead of
// hanging it when the timer is late.
const armGuard = 10 * time.Second

// a minute-aligned start, so that TimeWindow(time.Minute) ends a minute
// after it.
var armStart = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// feed emits, tracked, the items sent on items, and reports each item's
// outcome on outcomes; it keeps the input open until the run stops.
type armFeed struct {
	items    chan int
	outcomes chan node.Outcome
}

func newArmFeed() *armFeed {
	return &armFeed{items: make(chan int), outcomes: make(chan node.Outcome, 16)}
}

func (f *armFeed) Run(ctx context.Context, out node.Emitter[int]) error {
	for {
		select {
		case v := <-f.items:
			if err := out.EmitTracked(ctx, v, func(o node.Outcome) { f.outcomes <- o }); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func TestAggregateWindowEndsOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := newArmMovingClock(armStart.Add(10 * time.Second))
		feed := newArmFeed()
		got := make(chan time.Time, 1)
		b := pipeline.New("agg", pipeline.WithClock(clock))
		wins := pipeline.Aggregate(b, "sum", pipeline.Source[int](b, "src", feed), func(int) int { return 0 },
			pipeline.TimeWindow(time.Minute), zero, sum)
		pipeline.ForEach(b, "store", wins, func(_ context.Context, w pipeline.Window[int, int]) error {
			assert.False(t, w.Partial)
			assert.Equal(t, armStart.Add(time.Minute), w.End)
			got <- clock.Now()
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, build(t, b))

		clock.moveAtNextArm(20 * time.Second) // the window's timer, armed once the item is placed
		feed.items <- 1
		clock.waitRearmed(t, "the window's timer")
		clock.Advance(armStart.Add(time.Minute).Sub(clock.Now()))
		select {
		case at := <-got:
			assert.Equal(t, armStart.Add(time.Minute), at, "handed on at its end")
		case <-time.After(armGuard):
			t.Fatal("the window was not handed on at its end: its timer fires late by the clock's move")
		}
		cancel()
		_, err := run.Wait()
		require.ErrorIs(t, err, context.Canceled)
	}
}

func TestJoinExpiresOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := newArmMovingClock(armStart)
		left, right := newArmFeed(), newArmFeed()
		b := pipeline.New("join", pipeline.WithClock(clock))
		pairs := pipeline.Join(b, "pair", pipeline.Source[int](b, "left", left), pipeline.Source[int](b, "right", right),
			func(v int) int { return v }, func(v int) int { return v }, time.Minute, func(l, r int) int { return l + r })
		pipeline.Sink(b, "store", pairs, &pipelinetest.Collector[int]{})
		ctx, cancel := context.WithCancel(t.Context())
		run := pipelinetest.Start(ctx, build(t, b))

		clock.moveAtNextArm(20 * time.Second) // the expiry timer, armed once the item waits
		left.items <- 1
		clock.waitRearmed(t, "the expiry timer")
		clock.Advance(armStart.Add(time.Minute).Sub(clock.Now()))
		select {
		case o := <-left.outcomes:
			assert.Equal(t, node.Filtered, o, "an unmatched item is dropped at its window's end")
		case <-time.After(armGuard):
			t.Fatal("the unmatched item was kept past its window: the expiry timer fires late by the clock's move")
		}
		cancel()
		_, err := run.Wait()
		require.ErrorIs(t, err, context.Canceled)
	}
}

func TestAttemptTimeoutEndsOnTimeWhenTheClockMovesWhileArming(t *testing.T) {
	t.Parallel()
	for range 10 {
		clock := newArmMovingClock(armStart)
		deadlines := make(chan time.Time, 1)
		ended := make(chan time.Time, 1)
		tr := node.TransformFunc[int, int](func(ctx context.Context, v int) (int, error) {
			done := ctx.Done() // arms the deadline's timer
			dl, ok := ctx.Deadline()
			assert.True(t, ok)
			deadlines <- dl
			<-done
			ended <- clock.Now()
			return 0, ctx.Err()
		})
		b := pipeline.New("timeout", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{OnItemFailure: resilience.Skip}
			o.ItemRetry.AttemptTimeout = time.Minute
		}))
		out := pipeline.Transform(b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), tr)
		pipeline.Sink(b, "store", out, &pipelinetest.Collector[int]{})
		clock.moveAtNextArm(20 * time.Second) // the deadline's timer
		run := pipelinetest.Start(t.Context(), build(t, b))

		dl := <-deadlines
		assert.Equal(t, armStart.Add(time.Minute), dl, "the deadline counts from the call's start")
		clock.waitRearmed(t, "the deadline's timer")
		clock.Advance(dl.Sub(clock.Now()))
		select {
		case at := <-ended:
			assert.Equal(t, dl, at, "the call's context is done at its deadline")
		case <-time.After(armGuard):
			t.Fatal("the call's context was not done at its deadline: its timer fires late by the clock's move")
		}
		res, err := run.Wait()
		require.NoError(t, err)
		assert.Equal(t, int64(1), nodeOf(t, res, "call").Skipped)
	}
}
