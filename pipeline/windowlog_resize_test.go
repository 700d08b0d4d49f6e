package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A run resumed with another window size fails before it writes a window,
// naming the node and both sizes: the saved log matched none of the new
// windows while the position had passed the items of the logged ones, so
// [0:00, 2:00) was handed on complete with 2 of its 5 items (a review's
// finding). Resumed with the size it was saved with, the run goes on.
func TestResumeWithAnotherWindowSizeIsRefused(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	run := resumable(t, store)
	first, err := run(pipeline.TimeWindow(time.Minute), time.Minute)
	require.Error(t, err)
	require.Len(t, first, 1)
	_, logged := saved(t, store)
	require.NotEmpty(t, logged, "the first run logged its written window")

	again, err := run(pipeline.TimeWindow(2*time.Minute), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Aggregate "sum": the checkpoint logged windows 1m0s long every 1m0s, and the node's are 2m0s long every 2m0s`)
	assert.Empty(t, again, "no window handed on")

	same, err := run(pipeline.TimeWindow(time.Minute), 0)
	require.NoError(t, err)
	var values []int
	for _, w := range same {
		values = append(values, w.Value)
	}
	assert.Equal(t, []int{24, 32}, values, "[1:00, 2:00) rebuilt whole, [3:00, 4:00) at the end; [0:00, 1:00) not again")
}

// The same for a step changed alone: resumed as SlidingWindow(2m, 1m)
// from TimeWindow(2m), [1:00, 3:00) was handed on complete with 32 of
// its 56 (a review's finding).
func TestResumeWithAnotherWindowStepIsRefused(t *testing.T) {
	t.Parallel()
	store := checkpoint.NewMemory()
	run := resumable(t, store)
	first, err := run(pipeline.TimeWindow(2*time.Minute), 2*time.Minute)
	require.Error(t, err)
	require.Len(t, first, 1, "[0:00, 2:00) written")
	again, err := run(pipeline.SlidingWindow(2*time.Minute, time.Minute), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the checkpoint logged windows 2m0s long every 2m0s, and the node's are 2m0s long every 1m0s`)
	assert.Empty(t, again, "no window handed on")
}

// resumable returns a run of logItems through an event-time Aggregate of
// spec under a checkpoint in store, whose sink fails on the window that
// starts failAt after epoch (0: none).
func resumable(t *testing.T, store checkpoint.Store) func(spec pipeline.WindowSpec, failAt time.Duration) ([]pipeline.Window[int, int], error) {
	return func(spec pipeline.WindowSpec, failAt time.Duration) ([]pipeline.Window[int, int], error) {
		b := pipeline.New("wl", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithCheckpoint(store, time.Hour),
			pipeline.WithProfile(resilience.ProfileHighThroughput)) // no item retry: the failing write fails the run at once
		var late pipeline.Stream[ev]
		wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", &logSource{items: logItems}), evKey, spec, evZero, evSum,
			pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late))
		pipeline.Sink(b, "late", late, node.SinkFunc[ev](func(context.Context, ev) error { return errors.New("no item is late here") }))
		sink := &winSink{}
		pipeline.Sink(b, "store", wins, node.SinkFunc[pipeline.Window[int, int]](func(ctx context.Context, w pipeline.Window[int, int]) error {
			if failAt > 0 && w.Start.Equal(epoch.Add(failAt)) {
				return errors.New("crash")
			}
			return sink.Write(ctx, w)
		}))
		_, err := build(t, b).Run(t.Context())
		return sink.got(), err
	}
}
