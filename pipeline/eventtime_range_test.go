package pipeline_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// farBack is 2^64 ns (about 584 years) before epoch: its Unix
// nanoseconds are epoch's.
var farBack = func() time.Time {
	t := epoch
	for range 4 {
		t = t.Add(-(1 << 62))
	}
	return t
}()

// Two time windows 2^64 ns apart are two windows. They were known by
// their starts in Unix nanoseconds, which wrap: the later item joined the
// earlier window, and its own was never handed on.
func TestTimeWindowsCenturiesApartAreTwo(t *testing.T) {
	t.Parallel()
	for _, spec := range []pipeline.WindowSpec{pipeline.TimeWindow(1 << 20), pipeline.SlidingWindow(1<<20, 1<<19)} {
		items := []ev{{ID: 1, At: farBack, V: 1}, {ID: 2, At: epoch, V: 10}}
		b := pipeline.New("et", pipeline.WithDeadLetter(deadletter.NewMemory(10)))
		wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", pipelinetest.NewSliceSource(items...)), evKey, spec, evZero, evSum,
			pipeline.EventTime(evAt, 0, 0))
		out := &pipelinetest.Collector[pipeline.Window[int, int]]{}
		pipeline.Sink(b, "store", wins, out)
		_, err := build(t, b).Run(t.Context())
		require.NoError(t, err)
		for _, w := range out.Items() {
			want := 1
			if w.Start.Year() > 2000 {
				want = 10
			}
			assert.Equal(t, want, w.Value, "window at %s holds its own item alone", w.Start)
			assert.Equal(t, 1, w.Count, "window at %s", w.Start)
		}
		n := len(out.Items())
		assert.True(t, n == 2 || n == 4, "each item's windows: %d", n)
	}
}

// Under WithCheckpoint, an Aggregate's window log saves its windows in
// Unix nanoseconds (1677-09-21 to 2262-04-11): an item whose windows lie
// beyond goes to the node's failure action, naming the node, and moves
// no watermark; without a log, such items are windowed as any other.
func TestEventTimeTheWindowLogCannotHoldIsRefused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		items   []ev
		refused []int // the IDs dead-lettered
		wins    int
	}{
		"2^64 ns before another": {
			items: []ev{{ID: 1, At: farBack, V: 1}, {ID: 2, At: epoch, V: 10}}, refused: []int{1}, wins: 1,
		},
		"zero time first": {
			items: []ev{{ID: 1, V: 1}, {ID: 2, At: epoch, V: 10}, {ID: 3, At: epoch.Add(time.Second), V: 100}}, refused: []int{1}, wins: 1,
		},
		"zero time between": {
			items: []ev{{ID: 1, At: epoch, V: 1}, {ID: 2, V: 1000}, {ID: 3, At: epoch.Add(2 * time.Minute), V: 10}}, refused: []int{2}, wins: 2,
		},
		"year 9999 would move the watermark past every other item": {
			items:   []ev{{ID: 1, At: epoch, V: 1}, {ID: 2, At: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), V: 1000}, {ID: 3, At: epoch.Add(time.Second), V: 10}},
			refused: []int{2}, wins: 1,
		},
		"a window reaching past 2262": {
			items: []ev{{ID: 1, At: time.Unix(0, math.MaxInt64-int64(time.Second)), V: 1}, {ID: 2, At: epoch, V: 10}}, refused: []int{1}, wins: 1,
		},
		"the last whole minute of 2262's range is held": {
			items: []ev{{ID: 1, At: time.Unix(0, math.MaxInt64).Truncate(time.Minute).Add(-2 * time.Minute), V: 1}}, refused: nil, wins: 1,
		},
		"the first whole minute of 1677's range is held": {
			items: []ev{{ID: 1, At: time.Unix(0, math.MinInt64).Truncate(time.Minute).Add(2 * time.Minute), V: 1}}, refused: nil, wins: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dl := deadletter.NewMemory(10)
			b := pipeline.New("et", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithDeadLetter(dl),
				pipeline.WithCheckpoint(checkpoint.NewMemory(), time.Hour),
				pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
			wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", &logSource{items: tc.items}), evKey,
				pipeline.TimeWindow(time.Minute), evZero, evSum, pipeline.EventTime(evAt, 0, 0))
			out := &winSink{}
			pipeline.Sink(b, "store", wins, out)
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			var refused []int
			for _, env := range dl.Envelopes() {
				refused = append(refused, env.Item.(ev).ID)
				assert.Equal(t, "sum", env.OriginNode)
				assert.True(t, strings.Contains(env.ErrText, "window log holds under WithCheckpoint (1677-09-21 to 2262-04-11"), "the letter says why: %s", env.ErrText)
			}
			assert.Equal(t, tc.refused, refused, "dead-lettered")
			got := out.got()
			require.Len(t, got, tc.wins, "windows: %v", got)
			total, want := 0, 0
			for _, w := range got {
				total += w.Value
			}
			for _, it := range tc.items {
				want += it.V
			}
			for _, id := range tc.refused {
				want -= tc.items[id-1].V
			}
			assert.Equal(t, want, total, "every item not refused is in its window once: %v", got)
		})
	}
}

// Under the default failure action such an item fails the run, whose
// error names the node and the time.
func TestEventTimeTheWindowLogCannotHoldFailsTheRunByDefault(t *testing.T) {
	t.Parallel()
	dl := deadletter.NewMemory(10)
	b := pipeline.New("et", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithDeadLetter(dl),
		pipeline.WithCheckpoint(checkpoint.NewMemory(), time.Hour))
	wins := pipeline.Aggregate(b, "sum", pipeline.Source(b, "src", &logSource{items: []ev{{At: epoch}, {ID: 1}}}), evKey,
		pipeline.TimeWindow(time.Minute), evZero, evSum, pipeline.EventTime(evAt, 0, 0))
	pipeline.Sink(b, "store", wins, &winSink{})
	_, err := build(t, b).Run(t.Context())
	var ne *pipeline.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "sum", ne.Node)
	assert.Contains(t, err.Error(), "event time 0001-01-01T00:00:00Z is outside")
	assert.Zero(t, dl.Len(), "the default action fails the run; it dead-letters nothing")
}
