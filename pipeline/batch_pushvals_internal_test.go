package pipeline

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A batch edge recycles its slices uncleared, so a slice a writer gathers
// untracked values into may still point to the trackers of its last
// batch. pushVals, which sets the values alone, must leave none of them:
// a stale tracker would make an untracked item report another item's
// fate. Each case leaves one stale tracker at one place of the slice (the
// eight-at-a-time part and the rest), and one case all of them.
func TestPushValsDropsTheTrackersOfARecycledSlice(t *testing.T) {
	t.Parallel()
	const size = 32 // 31 values set: three rounds of eight and 7 more
	for _, stale := range []int{0, 1, 7, 8, 15, 23, 24, 27, 30, 31, -1} {
		t.Run(fmt.Sprintf("stale=%d", stale), func(t *testing.T) {
			t.Parallel()
			e := newEdge[int](4*size, size).(*batchEdge[int])
			old := make([]envelope[int], size)
			for i := range old {
				if stale == -1 || i == stale {
					old[i].tr = &tracker{}
				}
			}
			e.free <- old[:0]
			w := &writer[int]{max: size, one: e, keeps: true, out: tally{dst: new(atomic.Int64)}, batches: new(atomic.Int64)}
			w.buf = e.take(nil)
			require.Equal(t, size, cap(w.buf), "the writer gathers into the recycled slice")

			vals := make([]int, size+3)
			for i := range vals {
				vals[i] = 100 + i
			}
			took, err := w.pushVals(context.Background(), vals)
			require.NoError(t, err)
			require.Equal(t, len(vals), took)

			sent := <-e.ch
			require.Equal(t, size, len(sent), "a full batch is sent")
			for i, env := range sent {
				assert.Equal(t, 100+i, env.val, "value %d", i)
				assert.True(t, env.tr == nil, "item %d of the sent batch keeps a stale tracker", i)
			}
			for i, env := range w.buf {
				assert.Equal(t, 100+size+i, env.val, "gathered value %d", i)
				assert.True(t, env.tr == nil, "gathered item %d keeps a stale tracker", i)
			}
		})
	}
}

// A gathering skips clearing its slice only for values that hold no
// pointer: a value that holds one, however deep, must be cleared so that
// what it points to can be collected.
func TestPointerFreeKnowsWhichValuesHoldPointers(t *testing.T) {
	t.Parallel()
	type flat struct {
		A int
		B [3]float64
		C struct{ D bool }
	}
	type deep struct {
		A int
		B [2]struct{ S string }
	}
	for _, c := range []struct {
		typ  reflect.Type
		free bool
	}{
		{reflect.TypeFor[int](), true},
		{reflect.TypeFor[complex128](), true},
		{reflect.TypeFor[flat](), true},
		{reflect.TypeFor[[0]*int](), true},
		{reflect.TypeFor[struct{}](), true},
		{reflect.TypeFor[string](), false},
		{reflect.TypeFor[[]int](), false},
		{reflect.TypeFor[*int](), false},
		{reflect.TypeFor[any](), false},
		{reflect.TypeFor[map[int]int](), false},
		{reflect.TypeFor[func()](), false},
		{reflect.TypeFor[chan int](), false},
		{reflect.TypeFor[uintptr](), false},
		{reflect.TypeFor[deep](), false},
		{reflect.TypeFor[[4]*int](), false},
	} {
		assert.Equal(t, c.free, pointerFree(c.typ), "%s", c.typ)
	}
}

// A gathering of values that hold pointers clears the slice it keeps for
// the next items, so that the values handed on are not kept alive by it.
func TestGatheringClearsPointersItKeeps(t *testing.T) {
	t.Parallel()
	g := newGathering[*int](8)
	x := new(int)
	full := make([]envelope[*int], 8)
	for i := range full {
		full[i].val = x
	}
	g.add(full)
	vals, _ := g.lend()
	g.reset(vals)
	for i, v := range vals[:8] {
		assert.True(t, v == nil, "value %d still points to the item", i)
	}
	g.add(full[:1])
	vals, _ = g.take() // 1 of 8: handed on in a copy, the large slice kept
	require.Equal(t, 1, len(vals))
	require.Equal(t, 8, cap(g.vals))
	assert.True(t, g.vals[:1][0] == nil, "the kept slice still points to the item")
}

// gathering.add copies the values of a run and keeps the trackers aside
// once one item is tracked, wherever it is in the run (the
// eight-at-a-time part or the rest), and only then.
func TestGatheringAddFindsATrackerAnywhereInARun(t *testing.T) {
	t.Parallel()
	for n := range 20 {
		for at := -1; at < n; at++ {
			g := newGathering[int](32)
			run := make([]envelope[int], n)
			tr := &tracker{}
			for i := range run {
				run[i].val = 10 + i
				if i == at {
					run[i].tr = tr
				}
			}
			g.add(run)
			require.Equal(t, n, len(g.vals), "n=%d at=%d", n, at)
			for i, v := range g.vals {
				assert.Equal(t, 10+i, v, "n=%d at=%d value %d", n, at, i)
			}
			if at < 0 {
				assert.True(t, g.trs == nil, "n=%d: trackers kept though none is tracked", n)
				continue
			}
			require.Equal(t, n, len(g.trs), "n=%d at=%d", n, at)
			for i, got := range g.trs {
				assert.True(t, (got == tr) == (i == at), "n=%d at=%d tracker %d", n, at, i)
			}
		}
	}
}
