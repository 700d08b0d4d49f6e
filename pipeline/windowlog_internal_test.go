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
	})
	require.NoError(t, err)
	led := &ledger{}
	root := func(idx uint64) *tracker { return &tracker{led: led, idx: idx} }
	// Window 3 [0:00, 1:00) written in this run, of items 2 and 5.
	l.record(windowID[int]{key: 3, start: at(0).UnixNano()}, at(1), &tracker{parents: []*tracker{root(2), nil, root(5)}})

	ws, changed, err := l.snapshot(100)
	require.NoError(t, err)
	assert.Equal(t, []string{"1@00:00", "2@01:00", "3@00:00"}, windowsOf(ws), "no watermark yet: nothing is moot")
	assert.Equal(t, uint64(1), changed)

	l.mark(at(1).Add(30 * time.Second))
	ws, _, err = l.snapshot(4)
	require.NoError(t, err)
	assert.Equal(t, []string{"2@01:00", "3@00:00"}, windowsOf(ws), "1 is passed by the watermark, and no item of it came; 3 has item 5 after the position")
	assert.False(t, l.written(windowID[int]{key: 1, start: at(0).UnixNano()}, at(1), 9), "pruned")

	assert.True(t, l.written(windowID[int]{key: 2, start: at(1).UnixNano()}, at(2), 7), "an item of 2 read again")
	assert.False(t, l.written(windowID[int]{key: 2, start: at(1).UnixNano()}, at(3), 7), "a window of another size is another window")
	l.mark(at(3))
	ws, _, err = l.snapshot(6)
	require.NoError(t, err)
	assert.Equal(t, []string{"2@01:00"}, windowsOf(ws), "3 is moot at 5; 2 has item 7")
	ws, changed, err = l.snapshot(7)
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
	l, err := newWindowLog[lossyKey]("sum", nil)
	require.NoError(t, err)
	l.record(windowID[lossyKey]{key: 3}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	l.record(windowID[lossyKey]{key: 0}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	wins, _, err := l.snapshot(0)
	require.NoError(t, err)
	require.Len(t, wins, 1, "the key 0 comes back equal and is kept")
	assert.JSONEq(t, "0", string(wins[0].Key))
	assert.Equal(t, 1, l.unlogged)
}

// A string key passes Build, but a value that is not UTF-8 comes back
// from JSON with U+FFFD: its window is left out, the others are saved.
func TestWindowLogLeavesOutAStringKeyThatIsNotUTF8(t *testing.T) {
	l, err := newWindowLog[string]("sum", nil)
	require.NoError(t, err)
	l.record(windowID[string]{key: "k\xff2"}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	l.record(windowID[string]{key: "ok"}, time.Unix(0, 1), &tracker{parents: []*tracker{nil}})
	wins, _, err := l.snapshot(0)
	require.NoError(t, err)
	require.Len(t, wins, 1)
	assert.JSONEq(t, `"ok"`, string(wins[0].Key))
	wins, _, err = l.snapshot(0)
	require.NoError(t, err)
	assert.Len(t, wins, 1, "the key left out stays out")
	assert.Equal(t, 1, l.unlogged)
}
