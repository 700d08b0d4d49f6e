package pipeline

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// windowsOf returns the keys and starts of a snapshot, as "key@start".
func windowsOf(ws []loggedWindow) []string {
	var out []string
	for _, w := range ws {
		out = append(out, string(w.Key)+"@"+time.Unix(0, w.Start).UTC().Format("04:05"))
	}
	return out
}

// The log keeps a written window until the watermark passed its end and
// the committed position passed every item of it the run read: then no
// item a resumed run reads again falls in it.
func TestWindowLogPrunesWhatThePositionMakesMoot(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	l, err := newWindowLog[int]("sum", []loggedWindow{
		{Key: json.RawMessage("1"), Start: at(0).UnixNano(), End: at(1).UnixNano()},
		{Key: json.RawMessage("2"), Start: at(1).UnixNano(), End: at(2).UnixNano()},
	}, time.Time{}, false)
	require.NoError(t, err)
	// The node's watermark moves, with no item after the position taken.
	mark := func(wm time.Time) { l.took(0, time.Time{}, false, wm) }
	led := &ledger{}
	root := func(idx uint64) *tracker { return &tracker{led: led, idx: idx} }
	// Window 3 [0:00, 1:00) written in this run, of items 2 and 5.
	l.record(timeWindowID(3, at(0)), at(1), &tracker{parents: []*tracker{root(2), nil, root(5)}})

	ws, _, _, changed, err := l.snapshot(100)
	require.NoError(t, err)
	assert.Equal(t, []string{"1@00:00", "2@01:00", "3@00:00"}, windowsOf(ws), "no watermark yet: nothing is moot")
	assert.Equal(t, uint64(1), changed)

	mark(at(1).Add(30 * time.Second))
	ws, _, _, _, err = l.snapshot(4)
	require.NoError(t, err)
	assert.Equal(t, []string{"2@01:00", "3@00:00"}, windowsOf(ws), "1 is passed by the watermark, and no item of it came; 3 has item 5 after the position")
	assert.False(t, l.written(timeWindowID(1, at(0)), at(1), 9), "pruned")

	assert.True(t, l.written(timeWindowID(2, at(1)), at(2), 7), "an item of 2 read again")
	assert.False(t, l.written(timeWindowID(2, at(1)), at(3), 7), "a window of another size is another window")
	mark(at(3))
	ws, _, _, _, err = l.snapshot(6)
	require.NoError(t, err)
	assert.Equal(t, []string{"2@01:00"}, windowsOf(ws), "3 is moot at 5; 2 has item 7")
	ws, _, _, changed, err = l.snapshot(7)
	require.NoError(t, err)
	assert.Empty(t, ws)
	assert.Equal(t, uint64(1), changed, "pruning is no change to save")
}

// lossyKey encodes every key as 0: it does not round-trip.
type lossyKey int

func (lossyKey) MarshalJSON() ([]byte, error)  { return []byte("0"), nil }
func (*lossyKey) UnmarshalJSON(b []byte) error { return nil }

// A key whose own JSON methods do not round-trip passes Build (its
// methods are trusted there); at a save its window is left out of the
// log, rather than saved as another key or failing the save (a failed
// periodic save would stop the position's saves too).
func TestWindowLogLeavesOutAKeyThatDoesNotRoundTrip(t *testing.T) {
	require.NoError(t, jsonKeyProblem(reflect.TypeFor[lossyKey]()))
	l, err := newWindowLog[lossyKey]("sum", nil, time.Time{}, false)
	require.NoError(t, err)
	l.record(windowID[lossyKey]{key: 3}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	l.record(windowID[lossyKey]{key: 0}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	wins, _, _, _, err := l.snapshot(0)
	require.NoError(t, err)
	require.Len(t, wins, 1, "the key 0 comes back equal and is kept")
	assert.JSONEq(t, "0", string(wins[0].Key))
	assert.Equal(t, 1, l.unlogged)
}

// A string key passes Build, but a value that is not UTF-8 comes back
// from JSON with U+FFFD: its window is left out, the others are saved.
func TestWindowLogLeavesOutAStringKeyThatIsNotUTF8(t *testing.T) {
	l, err := newWindowLog[string]("sum", nil, time.Time{}, false)
	require.NoError(t, err)
	l.record(windowID[string]{key: "k\xff2"}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	l.record(windowID[string]{key: "ok"}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	wins, _, _, _, err := l.snapshot(0)
	require.NoError(t, err)
	require.Len(t, wins, 1)
	assert.JSONEq(t, `"ok"`, string(wins[0].Key))
	wins, _, _, _, err = l.snapshot(0)
	require.NoError(t, err)
	assert.Len(t, wins, 1, "the key left out stays out")
	assert.Equal(t, 1, l.unlogged)
}

// A save keeps the watermark before the first item taken after its
// position: every item a resumed run reads again was taken with that
// watermark or a later one (or not yet), so the watermark restored makes
// none of them late that was not. Not the node's latest watermark, which
// items after the position moved.
func TestWindowLogSavesTheWatermarkOfThePosition(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	l, err := newWindowLog[int]("sum", nil, time.Time{}, false)
	require.NoError(t, err)
	snap := func(idx uint64) (time.Time, bool) {
		_, wm, ok, _, err := l.snapshot(idx)
		require.NoError(t, err)
		return wm, ok
	}
	_, ok := snap(0)
	assert.False(t, ok, "no item taken, none restored: no watermark")

	l.took(1, time.Time{}, false, at(1)) // the run's first item: no watermark before it
	l.took(2, at(1), true, at(2))
	l.took(3, at(2), true, at(2)) // on time, moves nothing
	l.took(4, at(2), true, at(5))
	_, ok = snap(0)
	assert.False(t, ok, "item 1 is read again, and was taken with no watermark")
	wm, ok := snap(1)
	assert.True(t, ok)
	assert.Equal(t, at(1), wm, "item 2 was taken with 1")
	wm, _ = snap(2)
	assert.Equal(t, at(2), wm, "items 3 and 4 were taken with 2, not the latest 5")
	wm, _ = snap(3)
	assert.Equal(t, at(2), wm)
	wm, _ = snap(4)
	assert.Equal(t, at(5), wm, "nothing taken after the position: the node's watermark")
	assert.Empty(t, l.runs, "the runs the position passed are forgotten")

	// Items out of the order of their positions (a parked retry let item
	// 6 by): item 7, then 6 and 5, taken later, with later watermarks.
	l.took(7, at(5), true, at(6))
	l.took(6, at(6), true, at(8))
	l.took(5, at(8), true, at(8))
	wm, _ = snap(4)
	assert.Equal(t, at(5), wm, "7 was taken first, with 5: 5 and 6 are read again too, with 8 and 6 then")
	wm, _ = snap(6)
	assert.Equal(t, at(5), wm, "7 is read again")
	wm, _ = snap(7)
	assert.Equal(t, at(8), wm)

	// An untracked item (index 0) is read again by no resume.
	l.took(0, at(8), true, at(9))
	wm, _ = snap(7)
	assert.Equal(t, at(9), wm)
}

// The watermark saved prunes: a written window whose items are all at or
// before the position stays in the log until the watermark saved, not
// the node's latest, passed its end, for the resumed run starts there.
func TestWindowLogPrunesByTheSavedWatermark(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	l, err := newWindowLog[int]("sum", nil, time.Time{}, false)
	require.NoError(t, err)
	led := &ledger{}
	l.took(1, time.Time{}, false, at(0))
	l.took(2, at(0), true, at(3))
	l.record(timeWindowID(0, at(0)), at(1), &tracker{led: led, idx: 1})
	ws, wm, _, _, err := l.snapshot(1)
	require.NoError(t, err)
	assert.Equal(t, at(0), wm)
	assert.Equal(t, []string{"0@00:00"}, windowsOf(ws), "the node's watermark 3 passed its end, the saved 0 did not")
	ws, wm, _, _, err = l.snapshot(2)
	require.NoError(t, err)
	assert.Equal(t, at(3), wm)
	assert.Empty(t, ws)
}

// Past maxRuns, runs are merged into the earlier watermark of each pair:
// a save keeps an earlier watermark than it could, never a later one.
func TestWindowLogBoundsItsRuns(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	l, err := newWindowLog[int]("sum", nil, at(0), true)
	require.NoError(t, err)
	l.maxRuns = 4
	for i := 1; i <= 100; i++ {
		l.took(uint64(i), at(i-1), true, at(i))
		assert.LessOrEqual(t, len(l.runs), 4)
	}
	for p := uint64(0); p < 100; p++ {
		_, wm, ok, _, err := l.snapshot(p)
		require.NoError(t, err)
		require.True(t, ok)
		assert.False(t, wm.After(at(int(p))), "position %d: %s is after the watermark item %d was taken with", p, wm.Format("15:04"), p+1)
	}
}

// A save prunes a window only once the saved watermark passed its end,
// compared as times: a watermark before 1677 (an item of 1700 less a
// maxLateness of 30 years) wrapped in Unix nanoseconds to about 2255,
// past every end, and a window still needed was pruned, to be written
// again after a resume (a review's finding).
func TestWindowLogDoesNotPruneByAWrappedWatermark(t *testing.T) {
	t.Parallel()
	l, err := newWindowLog[int]("sum", nil, time.Time{}, false)
	require.NoError(t, err)
	start := time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)
	require.NoError(t, checkTimeRange(start, time.Hour), "the item's windows lie in range")
	wm := start.Add(-30 * 365 * 24 * time.Hour)
	l.took(1, time.Time{}, false, wm)
	l.record(timeWindowID(0, start), end, &tracker{led: &ledger{}, idx: 1})
	ws, swm, ok, _, err := l.snapshot(1)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, swm.Before(end))
	assert.Len(t, ws, 1, "the saved watermark %s has not passed the window's end %s", swm, end)
}
