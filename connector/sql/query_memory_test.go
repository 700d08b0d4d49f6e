package sql_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
)

// memoryRows is the size of the flat-memory test's table: 200 000 rows
// (20 000 under the race detector), or SLUICE_SQL_MEMORY_ROWS (1000000
// for the million, which takes about 5 s).
func memoryRows() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_SQL_MEMORY_ROWS")); err == nil && n > 0 {
		return n
	}
	if raceEnabled {
		return 20_000
	}
	return 200_000
}

// heapSampler is an emitter that drops every item and, every step items,
// measures the live heap after a collection.
type heapSampler struct {
	n, step int
	heap    []uint64
}

func (h *heapSampler) sample() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.heap = append(h.heap, ms.HeapAlloc)
}

func (h *heapSampler) EmitAt(_ context.Context, _ order, _ []byte) error {
	h.n++
	if h.n%h.step == 0 {
		h.sample()
	}
	return nil
}

func (h *heapSampler) Emit(ctx context.Context, o order) error { return h.EmitAt(ctx, o, nil) }

// Reading a table holds one page in memory, whatever the table's size:
// the live heap after a tenth of the rows and after all of them differ
// by less than a megabyte.
func TestQueryMemoryIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("reads many rows")
	}
	n := memoryRows()
	db := openBenchDB(t)
	fillOrders(t, db, n)
	h := &heapSampler{step: n / 10}
	src := sluicesql.Query[order](db, sluicesql.SQLite, sluicesql.QueryOptions{Table: "orders", Key: []string{"id"}, PageSize: 1000})
	require.NoError(t, src.Run(context.Background(), trackedFree{h}))
	require.Equal(t, n, h.n)
	require.Len(t, h.heap, 10)
	low, high := h.heap[0], h.heap[0]
	for _, b := range h.heap {
		low, high = min(low, b), max(high, b)
	}
	t.Logf("%d rows: live heap from %d KiB to %d KiB (samples %v)", n, low>>10, high>>10, h.heap)
	assert.Less(t, high-h.heap[0], uint64(1<<20), "the heap grew with the rows read")
}

// trackedFree adds EmitTracked to a heapSampler.
type trackedFree struct{ *heapSampler }

func (f trackedFree) EmitTracked(ctx context.Context, o order, done func(node.Outcome)) error {
	done(0)
	return f.Emit(ctx, o)
}
