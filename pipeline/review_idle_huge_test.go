package pipeline_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// An idle timeout of the largest Duration (a common way to say "never")
// overflows in watermark.wake: idle + (end - latest) wraps negative, the
// timer is armed in the past, fires at once, moves nothing, and is armed
// in the past again. nextOr looks at the fired timer before the input,
// so the Aggregate spins and never takes its next item: the run hangs.
// The real-time bound below only detects the hang (it is not waited on
// when the code is right: the run takes microseconds).
func TestReviewHugeIdleTimeoutSpins(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(epoch)
	b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithDeadLetter(deadletter.NewMemory(10)))
	items := []ev{{ID: 0, V: 1, At: epoch}, {ID: 1, V: 2, At: epoch.Add(time.Second)}, {ID: 2, V: 3, At: epoch.Add(2 * time.Second)}}
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, pipeline.TimeWindow(time.Minute), evZero, evSum,
		pipeline.EventTime(evAt, 0, time.Duration(math.MaxInt64)))
	col := &pipelinetest.Collector[pipeline.Window[int, int]]{}
	pipeline.Sink(b, "store", wins, col)
	// A run that spun would never end: the context bounds it, and the
	// run then fails instead of the test binary hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := build(t, b).Run(ctx)
	require.NoError(t, err)
	require.Len(t, col.Items(), 1)
	assert.Equal(t, 6, col.Items()[0].Value)
}
