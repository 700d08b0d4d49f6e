package pipeline_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// idleRun starts an event-time Aggregate of spec on a fed source, with
// maxLateness a minute and an idle timeout of 5 s on a fake clock.
func idleRun(t *testing.T, spec pipeline.WindowSpec) (*evFeed, *windowLog, *pipeline.Pipeline, *clockwork.FakeClock, *pipelinetest.Running) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch.Add(24 * time.Hour))
	f := &evFeed{items: make(chan ev)}
	b := pipeline.New("et", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDeadLetter(deadletter.NewMemory(1)))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", f), evKey, spec, evZero, evSum,
		pipeline.EventTime(evAt, time.Minute, 5*time.Second))
	log := &windowLog{}
	pipeline.ForEach(b, "store", wins, log.write)
	p := build(t, b)
	return f, log, p, clock, pipelinetest.Start(t.Context(), p)
}

// On a count window, the idle timeout places the items that waited for
// the watermark, in the order of their time, and hands on the windows they
// fill; a count window that is not full stays open for the key's next
// items: it is not handed on Partial.
func TestEventTimeIdleCountWindow(t *testing.T) {
	t.Parallel()
	f, log, p, clock, run := idleRun(t, pipeline.CountWindow(2))
	f.items <- ev{V: 1, At: epoch.Add(10 * time.Second)}
	f.items <- ev{V: 2, At: epoch.Add(5 * time.Second)}
	f.items <- ev{V: 4, At: epoch.Add(7 * time.Second)}
	taken(p, "sum", 3)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(4 * time.Second)
	assert.Equal(t, 0, log.len(), "not idle yet: the items wait for the watermark")
	clock.Advance(time.Second)
	assert.Equal(t, []pipeline.Window[int, int]{{Count: 2, Value: 6}}, log.wait(1), "the two earliest, in the order of their time")
	f.items <- ev{V: 8, At: epoch.Add(20 * time.Second)}
	taken(p, "sum", 4)
	close(f.items)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, []pipeline.Window[int, int]{{Count: 2, Value: 6}, {Count: 2, Value: 9}}, log.wait(0),
		"the item left at the idle timeout is in the next window, which fills")
}

// On a session window, the idle timeout hands the open sessions on,
// Partial, and closes them: a later item that is not late opens a new
// session, even within the gap of the closed one.
func TestEventTimeIdleSessionWindow(t *testing.T) {
	t.Parallel()
	f, log, p, clock, run := idleRun(t, pipeline.SessionWindow(time.Minute))
	f.items <- ev{V: 1, At: epoch}
	f.items <- ev{V: 2, At: epoch.Add(30 * time.Second)}
	f.items <- ev{Key: 1, V: 4, At: epoch.Add(10 * time.Second)}
	taken(p, "sum", 3)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(5 * time.Second)
	w := log.wait(2)
	// In the order of their ends.
	assert.Equal(t, pipeline.Window[int, int]{Key: 1, Start: epoch.Add(10 * time.Second), End: epoch.Add(70 * time.Second), Count: 1, Value: 4, Partial: true}, w[0])
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch, End: epoch.Add(90 * time.Second), Count: 2, Value: 3, Partial: true}, w[1])
	f.items <- ev{V: 8, At: epoch.Add(45 * time.Second)} // within the gap of the closed session, not late
	taken(p, "sum", 4)
	close(f.items)
	res, err := run.Wait()
	require.NoError(t, err)
	w = log.wait(0)
	require.Len(t, w, 3)
	assert.Equal(t, pipeline.Window[int, int]{Start: epoch.Add(45 * time.Second), End: epoch.Add(105 * time.Second), Count: 1, Value: 8, Partial: true}, w[2],
		"a new session")
	assert.Equal(t, int64(0), nodeOf(t, res, "sum").Late)
}
