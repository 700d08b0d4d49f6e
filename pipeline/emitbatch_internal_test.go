package pipeline

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// Holding (a source's burst, BeginBatch), a writer gathers tracked items
// as it gathers untracked ones, and sends them a full batch at a time;
// without it, a tracked item is sent at once with what was gathered
// before it.
func TestAWriterHoldingGathersTrackedItems(t *testing.T) {
	t.Parallel()
	const size = 8
	ctx := context.Background()
	e := newEdge[int](4*size, size).(*batchEdge[int])
	w := newWriter([]edge[int]{e}, &spec{stats: &counters{}})
	tracked := func(v int) envelope[int] { return envelope[int]{val: v, tr: &tracker{}} }

	w.hold = true
	for i := range size - 1 {
		require.NoError(t, w.add(ctx, nil, tracked(i)))
	}
	assert.Equal(t, 0, len(e.ch), "nothing is sent before the batch is full")
	require.NoError(t, w.add(ctx, nil, tracked(size-1)))
	require.Equal(t, 1, len(e.ch), "the item that fills the batch sends it")
	b := <-e.ch
	require.Len(t, b, size)
	for i := range b {
		assert.Equal(t, i, b[i].val)
		assert.True(t, b[i].tr != nil, "item %d keeps its tracker", i)
	}

	require.NoError(t, w.add(ctx, nil, tracked(100)))
	assert.Equal(t, 0, len(e.ch))
	w.hold = false
	require.NoError(t, w.add(ctx, nil, tracked(101)))
	require.Equal(t, 1, len(e.ch), "a tracked item is sent at once when the writer does not hold")
	b = <-e.ch
	require.Len(t, b, 2)
	assert.Equal(t, []int{100, 101}, []int{b[0].val, b[1].val})
}
