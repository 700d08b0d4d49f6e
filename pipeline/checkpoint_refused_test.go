package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// lateCtx is a context for one Emit call that ends while the call waits:
// its first Err (the emitter's look before it takes the item) finds it
// live, and its Done is closed, so a call that must wait for room is
// refused then, as when a source's own timeout for the call passes while
// it waits.
type lateCtx struct {
	context.Context
	looked atomic.Bool
}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newLateCtx() *lateCtx                     { return &lateCtx{Context: context.Background()} }
func (c *lateCtx) Done() <-chan struct{}       { return closedDone }
func (c *lateCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *lateCtx) Err() error {
	if c.looked.Swap(true) {
		return context.Canceled
	}
	return nil
}

// refusingRun runs a source that emits n items with EmitAt, each call
// with a lateCtx, into a sink that holds item 0 until a call was refused
// (n must be more than the items the pipeline holds);
// again says what the source does with a refused item: emit it again (at
// the same position) or go on without it. It returns the items written,
// the refusals and the positions saved.
func refusingRun(t *testing.T, n int, again bool) (written []int, refused int64, saves []string) {
	t.Helper()
	store := newMemStore()
	b := newCkpt(store, pipeline.WithHandOverBatch(1), pipeline.WithBuffer(1))
	var refusals atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	g := &got{}
	src := node.SourceFunc[int](func(ctx context.Context, emit node.Emitter[int]) error {
		defer free() // no call refused: the test fails, and does not hang
		for i := 0; i < n; i++ {
			err := emit.EmitAt(newLateCtx(), i, []byte(strconv.Itoa(i+1)))
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				refusals.Add(1)
				free()
				if again {
					err = emit.EmitAt(ctx, i, []byte(strconv.Itoa(i+1)))
				} else {
					continue
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, v int) error {
		if v == 0 {
			<-release
		}
		g.add(v)
		return nil
	}))
	require.NoError(t, <-runAsync(t.Context(), build(t, b)))
	store.mu.Lock()
	defer store.mu.Unlock()
	return g.values(), refusals.Load(), append([]string(nil), store.saves...)
}

// A source that emits again an item whose EmitAt was refused (its call's
// context ended while it waited for room) delivers every item, and the
// run's clean end saves the last position: the refusal used to stop the
// ledger for the rest of the run, so the next run read everything after
// it again (a review's finding).
func TestCheckpointAfterARefusedEmitAtEmittedAgain(t *testing.T) {
	t.Parallel()
	for _, n := range []int{4, 5, 50} {
		written, refused, saves := refusingRun(t, n, true)
		require.GreaterOrEqual(t, refused, int64(1), "n=%d: the test refuses a call", n)
		assert.Len(t, written, n, "n=%d", n)
		require.NotEmpty(t, saves, "n=%d", n)
		assert.Equal(t, "src="+strconv.Itoa(n), saves[len(saves)-1], "n=%d: saves %v", n, saves)
	}
}

// A source that goes on without an item whose EmitAt was refused leaves
// the position before it: the next run reads it, and what followed, again.
func TestCheckpointAfterARefusedEmitAtLeftBehind(t *testing.T) {
	t.Parallel()
	for _, n := range []int{4, 50} {
		written, refused, saves := refusingRun(t, n, false)
		require.GreaterOrEqual(t, refused, int64(1), "n=%d", n)
		require.Less(t, len(written), n, "n=%d", n)
		first := -1 // the first item refused: the first one missing
		for i, v := range written {
			if v != i {
				first = i
				break
			}
		}
		if first < 0 {
			first = len(written)
		}
		want := "src=" + strconv.Itoa(first) // the position just after item first-1
		if first == 0 {
			assert.Empty(t, saves, "n=%d", n)
			continue
		}
		require.NotEmpty(t, saves, "n=%d", n)
		assert.Equal(t, want, saves[len(saves)-1], "n=%d: written %v", n, written)
	}
}

// A source that gives two items one position (a record split in two) and
// goes on without the first of a pair, refused: the next EmitAt brings the
// refused item's position with another item, which is not the refused
// item emitted again, and no position at or past the refused one is
// saved. Taken for it, the ledger saved a position past an item never
// delivered, which the next run did not read (second review).
func TestCheckpointAfterARefusedEmitAtNotTheSameItem(t *testing.T) {
	t.Parallel()
	const n = 40
	store := newMemStore()
	b := newCkpt(store, pipeline.WithHandOverBatch(1), pipeline.WithBuffer(1))
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	g := &got{}
	refusedItem := -1
	src := node.SourceFunc[int](func(ctx context.Context, emit node.Emitter[int]) error {
		defer free()
		for i := 0; i < n; i++ {
			pos := []byte(strconv.Itoa(i/2 + 1)) // items 2k and 2k+1 at position k+1
			c := context.Context(ctx)
			if refusedItem < 0 && i%2 == 0 {
				c = newLateCtx() // may be refused: only the first of a pair
			}
			err := emit.EmitAt(c, i, pos)
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				refusedItem = i
				free()
				continue // goes on without it
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[int](func(_ context.Context, v int) error {
		if v == 0 {
			<-release
		}
		g.add(v)
		return nil
	}))
	require.NoError(t, <-runAsync(t.Context(), build(t, b)))
	require.GreaterOrEqual(t, refusedItem, 0, "the test refuses a call")
	require.NotContains(t, g.values(), refusedItem)
	store.mu.Lock()
	saves := append([]string(nil), store.saves...)
	store.mu.Unlock()
	for _, s := range saves {
		p, err := strconv.Atoi(s[len("src="):])
		require.NoError(t, err)
		assert.LessOrEqual(t, p, refusedItem/2, "item %d (position %d) was never delivered; saves %v", refusedItem, refusedItem/2+1, saves)
	}
}

type reusedRec struct{ V int }

// A source that decodes into one reused buffer (a refused item is the
// source's again, so it may reuse it) gives two records one position and
// goes on without the refused first one: the next EmitAt passes the same
// pointer holding another record. reflect.DeepEqual(p, p) is true for the
// same pointer, so the ledger takes the other record for the refused one
// and saved a position past a record never delivered (third review): an
// item that holds a pointer never counts as the refused one again.
func TestCheckpointAfterARefusedEmitAtOfAReusedBuffer(t *testing.T) {
	t.Parallel()
	const n = 40
	store := newMemStore()
	b := newCkpt(store, pipeline.WithHandOverBatch(1), pipeline.WithBuffer(1))
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	g := &got{}
	refusedItem := -1
	src := node.SourceFunc[*reusedRec](func(ctx context.Context, emit node.Emitter[*reusedRec]) error {
		defer free()
		buf := &reusedRec{}
		for i := 0; i < n; i++ {
			pos := []byte(strconv.Itoa(i/2 + 1)) // records 2k and 2k+1 at position k+1
			c := context.Context(ctx)
			if refusedItem < 0 && i%2 == 0 {
				c = newLateCtx()
			}
			var item *reusedRec
			if refusedItem >= 0 && i == refusedItem+1 {
				buf.V = i // reuse the refused record's buffer
				item = buf
			} else if refusedItem < 0 && i%2 == 0 {
				buf.V = i
				item = buf
			} else {
				item = &reusedRec{V: i}
			}
			err := emit.EmitAt(c, item, pos)
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				refusedItem = i
				free()
				continue // goes on without it
			}
			if err != nil {
				return err
			}
			if item == buf {
				buf = &reusedRec{} // emitted: the pipeline owns it now
			}
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[*reusedRec](func(_ context.Context, v *reusedRec) error {
		if v.V == 0 {
			<-release
		}
		g.add(v.V)
		return nil
	}))
	require.NoError(t, <-runAsync(t.Context(), build(t, b)))
	require.GreaterOrEqual(t, refusedItem, 0, "the test refuses a call")
	require.NotContains(t, g.values(), refusedItem)
	store.mu.Lock()
	saves := append([]string(nil), store.saves...)
	store.mu.Unlock()
	for _, s := range saves {
		p, err := strconv.Atoi(s[len("src="):])
		require.NoError(t, err)
		assert.LessOrEqual(t, p, refusedItem/2, "record %d (position %d) was never delivered; saves %v", refusedItem, refusedItem/2+1, saves)
	}
}

// A refused item of a struct of plain values (strings, numbers, a time)
// emitted again, as a copy, counts as the same: the run's clean end saves
// the last position.
func TestCheckpointAfterARefusedEmitAtOfAPlainStruct(t *testing.T) {
	t.Parallel()
	type row struct {
		ID   int
		Name string
		At   time.Time
	}
	const n = 30
	store := newMemStore()
	b := newCkpt(store, pipeline.WithHandOverBatch(1), pipeline.WithBuffer(1))
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var refused atomic.Int64
	g := &got{}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := node.SourceFunc[row](func(ctx context.Context, emit node.Emitter[row]) error {
		defer free()
		for i := 0; i < n; i++ {
			r := row{ID: i, Name: "row-" + strconv.Itoa(i), At: at.Add(time.Duration(i) * time.Second)}
			err := emit.EmitAt(newLateCtx(), r, []byte(strconv.Itoa(i+1)))
			if errors.Is(err, context.Canceled) && ctx.Err() == nil {
				refused.Add(1)
				free()
				err = emit.EmitAt(ctx, row{ID: i, Name: "row-" + strconv.Itoa(i), At: at.Add(time.Duration(i) * time.Second)}, []byte(strconv.Itoa(i+1)))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), node.SinkFunc[row](func(_ context.Context, r row) error {
		if r.ID == 0 {
			<-release
		}
		g.add(r.ID)
		return nil
	}))
	require.NoError(t, <-runAsync(t.Context(), build(t, b)))
	require.GreaterOrEqual(t, refused.Load(), int64(1))
	assert.Equal(t, n, g.count())
	store.mu.Lock()
	defer store.mu.Unlock()
	require.NotEmpty(t, store.saves)
	assert.Equal(t, "src="+strconv.Itoa(n), store.saves[len(store.saves)-1])
}
