package pipelinetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFaultsFollowTheirScript(t *testing.T) {
	t.Parallel()
	errA, errB := errors.New("a"), errors.New("b")
	f := pipelinetest.NewFaults(map[string][]error{"x": {errA, nil, errB}})
	var got []error
	for range 4 {
		_, err := f.Process(t.Context(), "x")
		got = append(got, err)
	}
	assert.Equal(t, []error{errA, nil, errB, nil}, got)
	assert.Equal(t, 4, f.Calls("x"))
	v, err := f.Process(t.Context(), "y")
	assert.NoError(t, err)
	assert.Equal(t, "y", v)

	always := pipelinetest.FailAlways(errA, 1, 2)
	for range 3 {
		_, err := always.Process(t.Context(), 2)
		assert.ErrorIs(t, err, errA)
	}
	_, err = always.Process(t.Context(), 3)
	assert.NoError(t, err)
}

func TestSourceCollectorAndRecorder(t *testing.T) {
	t.Parallel()
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("helpers", pipeline.WithObserver(rec))
	src := pipelinetest.NewTrackedSource(1, 2, 3)
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Source[int](b, "src", src), sink)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, sink.Items())
	assert.Equal(t, 3, sink.Len())
	assert.Equal(t, 1, src.Runs())
	assert.Equal(t, map[int][]node.Outcome{0: {node.Delivered}, 1: {node.Delivered}, 2: {node.Delivered}}, src.Outcomes())
	started, err := pipelinetest.WaitFor[observer.NodeEvent](t.Context(), rec, 4)
	require.NoError(t, err)
	assert.Len(t, started, 4, "two starts and two completions")
	assert.Len(t, pipelinetest.Of[observer.RetryEvent](rec), 0)
}

func TestAdvanceUntilDone(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	b := pipeline.New("clock", pipeline.WithClock(clock))
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2))
	wait := pipeline.Transform(b, "wait", src, node.TransformFunc[int, int](func(ctx context.Context, x int) (int, error) {
		<-clock.After(time.Duration(x) * time.Hour)
		return x, nil
	}))
	pipeline.Sink(b, "sink", wait, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	start := clock.Now()
	run := pipelinetest.Start(t.Context(), p)
	_, err = pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour)
	require.NoError(t, err)
	assert.True(t, run.Finished())
	assert.Equal(t, 3*time.Hour, clock.Since(start))
}
