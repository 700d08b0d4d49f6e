package progress_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
)

// An interval under a hundred nanoseconds still ticks: the tick was
// interval/drawEvery, 0 there, and NewTicker(0) panicked on the
// Reporter's own goroutine, killing the program (a review's finding).
func TestTinyIntervalStillTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ interval, window time.Duration }{
		{time.Nanosecond, time.Nanosecond},
		{50 * time.Nanosecond, time.Nanosecond},
		{99 * time.Nanosecond, 10 * time.Nanosecond},
	} {
		r := progress.New(&recorder{}, progress.WithTTY(false), progress.WithInterval(c.interval), progress.WithWindow(c.window))
		assert.Positive(t, r.TickEvery(), "interval %v, window %v", c.interval, c.window)
		r.Stop()
	}
}

// The percentages stay within 0 and 100 for counts past 9.2e16, where
// 100*count overflowed an int64 (a review's finding: 25 % showed as 1 %,
// other counts as negative).
func TestHugeCountsPercent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
	src := source("read")
	src.Sized, src.Size = true, 1<<62
	r := newReader(src, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	r.set(func(st *observer.Stats) {
		st.Nodes[0].Out = 1 << 60
		st.Nodes[1].In, st.Nodes[1].Out = 1<<60, 1<<60
	})
	h.tick()
	out := strings.Join(h.out.take(), "")
	assert.Contains(t, out, "settled 25%")
	assert.NotContains(t, out, "settled -")

	r.set(func(st *observer.Stats) { // one item short of the size
		st.Nodes[0].Out = 1<<62 - 1
		st.Nodes[1].In, st.Nodes[1].Out = 1<<62-1, 1<<62-1
	})
	h.tick()
	out = strings.Join(h.out.take(), "")
	assert.Contains(t, out, "settled 99%", "float rounding made it 100 with an item left")
}

// WithClock(nil) keeps the real clock, as slogobserver's does: a nil
// clock panicked in UseStats (so in Build) and in Stop.
func TestNilClockKeepsTheRealOne(t *testing.T) {
	t.Parallel()
	r := progress.New(&recorder{}, progress.WithTTY(false), progress.WithClock(nil))
	assert.NotPanics(t, func() { _ = r.UseStats(newReader(source("read"))) }, "UseStats")
	assert.NotPanics(t, r.Stop, "Stop")
}
