package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// big is an item of 512 bytes: a record of a bulk write.
type big [512]byte

// A MapBatch call of a few items makes a slice of those items, not of
// the node's size: f may keep its slice, so a slice of the node's size
// per call of one item (2 MiB for 512-byte items at size 4096) would be
// made, and pinned, for one item.
//
// Deterministic: 8 calls of one item allocate about 50 kB; the bound is
// 1 MiB for the whole run (one slice of the node's size is 2 MiB).
func TestMapBatchLingeredCallMakesASliceOfItsItems(t *testing.T) {
	const size, calls = 4096, 8
	clock := clockwork.NewFakeClock()
	feed := make(chan big)
	b := pipeline.New("lingered-alloc", pipeline.WithClock(clock))
	src := pipeline.Source(b, "src", node.SourceFunc[big](func(ctx context.Context, out node.Emitter[big]) error {
		for x := range feed {
			if err := out.Emit(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}))
	var (
		mu   sync.Mutex
		kept [][]big // f may keep its slice
		caps []int
	)
	got := make(chan struct{}, calls)
	out := pipeline.MapBatch(b, "bulk", src, size, time.Second, func(_ context.Context, ins []big) ([]int, []error) {
		mu.Lock()
		kept = append(kept, ins)
		caps = append(caps, cap(ins))
		mu.Unlock()
		outs := make([]int, len(ins))
		for i := range ins {
			outs[i] = int(ins[i][0])
		}
		got <- struct{}{}
		return outs, nil
	})
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	run := pipelinetest.Start(t.Context(), build(t, b))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range calls {
		feed <- big{byte(i)}
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(time.Second)
		<-got // a call of one item, by the linger
	}
	runtime.ReadMemStats(&after)
	close(feed)
	_, err := run.Wait()
	require.NoError(t, err)

	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, append([]int{}, sink.Items()...))
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("caps of the slices f got: %v; allocated during %d calls of one item: %d bytes", caps, calls, allocated)
	assert.True(t, allocated < 1<<20,
		"%d calls of one 512-byte item allocated %d bytes (slices of cap %v): each call's slice is made with the node's whole size", calls, allocated, caps)
}

// A Batch of more than 4096 items makes each slice about once: the
// first grows as items come, and each later one is made at the size
// that the first reached, not grown again from nothing.
//
// Deterministic: 16 slices of 8192 ints (1 MiB of slices handed on)
// allocate about 1.1 MiB; growing each slice from nothing by the
// runtime's steps made about 4×. The bound is 2.5×.
func TestBatchOverMaxPreallocMakesEachSliceOnce(t *testing.T) {
	const size, slices = 8192, 16
	n := size * slices
	var sum, seen int
	b := pipeline.New("large-alloc", pipeline.WithHandOverBatch(64))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", src, size, 0), node.SinkFunc[[]int](func(_ context.Context, v []int) error {
		seen += len(v)
		for _, x := range v {
			sum += x
		}
		return nil
	}))
	p := build(t, b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := p.Run(t.Context())
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, n, seen)
	assert.Equal(t, n*(n-1)/2, sum)
	allocated := after.TotalAlloc - before.TotalAlloc
	handed := uint64(n) * 8
	t.Logf("allocated %d bytes for %d bytes of slices handed on (%.2f×)", allocated, handed, float64(allocated)/float64(handed))
	assert.True(t, allocated < 5*handed/2, "allocated %d bytes for %d bytes of slices (%.2f×)", allocated, handed, float64(allocated)/float64(handed))
}

// A part slice after full ones (a linger's, the end of the input's) is
// handed on, or to f, in a slice of its own, at most about twice its
// length, not in the slice of the node's size it was gathered into; and
// every slice stays its holder's: a full one, a lingered one and the
// last keep their items once the node gathers more, though the holder
// appends to each. Through MapBatch without ReuseSlice and through Batch.
func TestPartSliceAfterFullSlicesIsASliceOfItsOwn(t *testing.T) {
	t.Parallel()
	const size = 8
	for _, kind := range []string{"MapBatch", "Batch"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			feed := make(chan int)
			b := pipeline.New("part-after-full", pipeline.WithClock(clock))
			src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				for x := range feed {
					if err := out.Emit(ctx, x); err != nil {
						return err
					}
				}
				return nil
			}))
			var (
				mu   sync.Mutex
				kept [][]int
				caps []int
			)
			got := make(chan struct{}, 10)
			keep := func(v []int) {
				mu.Lock()
				kept = append(kept, v)
				caps = append(caps, cap(v))
				mu.Unlock()
				_ = append(v, -1, -1, -1, -1) // writes past len, into v's capacity if it has some
				got <- struct{}{}
			}
			if kind == "MapBatch" {
				out := pipeline.MapBatch(b, "bulk", src, size, time.Second, func(_ context.Context, ins []int) ([]int, []error) {
					keep(ins)
					return make([]int, len(ins)), nil
				})
				pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
			} else {
				pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", src, size, time.Second),
					node.SinkFunc[[]int](func(_ context.Context, v []int) error { keep(v); return nil }))
			}
			run := pipelinetest.Start(t.Context(), build(t, b))

			for x := range size {
				feed <- x
			}
			<-got // [0 … 7], full
			feed <- 8
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
			clock.Advance(time.Second)
			<-got // [8], by its linger
			for x := 9; x < 9+size; x++ {
				feed <- x
			}
			<-got // [9 … 16], full
			for x := 17; x < 20; x++ {
				feed <- x
			}
			close(feed)
			<-got // [17 18 19], at the end of the input
			_, err := run.Wait()
			require.NoError(t, err)

			assert.Equal(t, [][]int{ints(20)[:8], {8}, ints(20)[9:17], {17, 18, 19}}, kept)
			for i, v := range kept {
				assert.True(t, caps[i] <= 2*len(v), "slice %d of %d items had capacity %d", i, len(v), caps[i])
			}
		})
	}
}

// With ReuseSlice, f is called on one slice for every batch call once a
// slice has been full: the slice grows while the slices gathered get
// larger (here from a lingered call of one item to a full one), then
// stays, for full slices, a lingered one and the last. A retry of one
// item calls f on a slice of its own, and the batch calls after it are
// on the node's slice again.
func TestReuseSliceIsOneSliceOnceFull(t *testing.T) {
	t.Parallel()
	const size = 8
	clock := clockwork.NewFakeClock()
	feed := make(chan int)
	b := pipeline.New("reuse-grows", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 1
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}))
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for x := range feed {
			if err := out.Emit(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}))
	var (
		calls batchCalls
		addrs []uintptr
		once  sync.Once
	)
	got := make(chan struct{}, 10)
	f := inPlace(&calls, &addrs, func(v int) error {
		var err error
		if v == 12 {
			once.Do(func() { err = resilience.MarkTransient(errors.New("twelve fails once")) })
		}
		return err
	})
	out := pipeline.MapBatch(b, "bulk", src, size, time.Second, func(ctx context.Context, ins []int) ([]int, []error) {
		defer func() { got <- struct{}{} }()
		return f(ctx, ins)
	}, pipeline.ReuseSlice())
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	run := pipelinetest.Start(t.Context(), build(t, b))

	linger := func(x int) {
		feed <- x
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(time.Second)
		<-got
	}
	linger(0) // [0]
	for x := 1; x <= size; x++ {
		feed <- x
	}
	<-got // [1 … 8], full
	for x := 9; x < 9+size; x++ {
		feed <- x
	}
	<-got // [9 … 16], full
	<-got // [12], its retry
	linger(17)
	feed <- 18
	feed <- 19
	close(feed)
	<-got // [18 19], at the end of the input
	_, err := run.Wait()
	require.NoError(t, err)

	assert.Equal(t, timesTen(20), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{{0}, ints(20)[1:9], ints(20)[9:17], {12}, {17}, {18, 19}}, calls.get())
	require.Len(t, addrs, 6)
	for _, i := range []int{2, 4, 5} {
		assert.Equal(t, addrs[1], addrs[i], "batch call %d got a slice of its own", i)
	}
	assert.NotEqual(t, addrs[1], addrs[3], "the retry of one item was called on the node's slice")
}
