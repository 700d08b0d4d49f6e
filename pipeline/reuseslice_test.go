package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// inPlace is a MapBatch function that records its calls, and the address
// of each slice it is called on, and multiplies each item by 10 in place,
// returning its own slice as the results; fail, when not nil, gives an
// item's error.
func inPlace(c *batchCalls, addrs *[]uintptr, fail func(int) error) func(context.Context, []int) ([]int, []error) {
	return func(_ context.Context, ins []int) ([]int, []error) {
		c.add(ins)
		c.mu.Lock()
		*addrs = append(*addrs, uintptr(unsafe.Pointer(unsafe.SliceData(ins))))
		c.mu.Unlock()
		var errs []error
		for i, v := range ins {
			if fail != nil {
				if err := fail(v); err != nil {
					if errs == nil {
						errs = make([]error, len(ins))
					}
					errs[i] = err
				}
			}
			ins[i] = v * 10
		}
		return ins, errs
	}
}

// With ReuseSlice, every call of a full slice gets the same slice, f may
// return it as its results, and each result is handed on before the slice
// is used again: every item arrives once, in order, with its own result,
// tracked or not, for no items, one, fewer than a slice, exactly a slice,
// and several slices and a part.
func TestReuseSliceCallsFOnOneSlice(t *testing.T) {
	t.Parallel()
	const size = 4
	for _, tracked := range []bool{false, true} {
		for _, n := range []int{0, 1, 3, size, 3*size + 1} {
			t.Run(fmt.Sprintf("tracked=%v/%d", tracked, n), func(t *testing.T) {
				t.Parallel()
				var (
					calls batchCalls
					addrs []uintptr
				)
				src := pipelinetest.NewSliceSource(ints(n)...)
				if tracked {
					src = pipelinetest.NewTrackedSource(ints(n)...)
				}
				sink := &pipelinetest.Collector[int]{}
				b := pipeline.New("reuse")
				out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), size, 0, inPlace(&calls, &addrs, nil), pipeline.ReuseSlice())
				pipeline.Sink(b, "sink", out, sink)
				p, err := b.Build()
				require.NoError(t, err)
				res, err := p.Run(t.Context())
				require.NoError(t, err)

				assert.Equal(t, timesTen(n), append([]int{}, sink.Items()...))
				var want [][]int
				for lo := 0; lo < n; lo += size {
					want = append(want, ints(n)[lo:min(lo+size, n)])
				}
				assert.Equal(t, want, calls.get())
				assert.Equal(t, len(want), len(addrs))
				for i, a := range addrs {
					assert.Equal(t, addrs[0], a, "call %d got a slice of its own", i)
				}
				st := nodeOf(t, res, "bulk")
				assert.Equal(t, int64(n), st.In)
				assert.Equal(t, int64(n), st.Out)
				if tracked {
					for i := range n {
						assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
					}
				}
			})
		}
	}
}

// Without ReuseSlice, each call gets a new slice, which f may keep: the
// slices f kept still hold their items once the run is over.
func TestMapBatchFMayKeepItsSlice(t *testing.T) {
	t.Parallel()
	const size, n = 4, 3*4 + 1
	var kept [][]int
	b := pipeline.New("keep")
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(n)...)), size, 0,
		func(_ context.Context, ins []int) ([]int, []error) {
			kept = append(kept, ins)
			outs := make([]int, len(ins))
			for i, v := range ins {
				outs[i] = v * 10
			}
			return outs, nil
		})
	sink := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, timesTen(n), append([]int{}, sink.Items()...))
	assert.Equal(t, ints(n), slices.Concat(kept...), "a slice f kept was used again")
}

// f may change its slice in place, and fail some of its items: a failed
// item is retried, and dead-lettered, with its own value as it came in,
// not what f left in the slice; with and without ReuseSlice.
func TestMapBatchFailedItemKeepsItsValueWhenFChangesTheSlice(t *testing.T) {
	t.Parallel()
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			t.Parallel()
			var (
				calls batchCalls
				addrs []uintptr
			)
			dlq := deadletter.NewMemory(10)
			b := pipeline.New("in-place", pipeline.WithDeadLetter(dlq), pipeline.WithResilience(func(o *resilience.Options) {
				o.ItemRetry.MaxRetries = 1
				o.ItemRetry.Backoff = resilience.Backoff{Kind: resilience.BackoffNone}
				o.OnItemFailure = resilience.DeadLetter
			}))
			var opts []pipeline.NodeOption
			if reuse {
				opts = append(opts, pipeline.ReuseSlice())
			}
			// 3 fails every call; 6 fails in its slice's call only.
			var once sync.Once
			out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(8)...)), 4, 0,
				inPlace(&calls, &addrs, func(v int) error {
					var err error
					switch v {
					case 3:
						err = resilience.MarkTransient(errors.New("three fails"))
					case 6:
						once.Do(func() { err = resilience.MarkTransient(errors.New("six fails once")) })
					}
					return err
				}), opts...)
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, sink)
			p, err := b.Build()
			require.NoError(t, err)
			_, err = p.Run(t.Context())
			require.NoError(t, err)

			assert.Equal(t, []int{0, 10, 20, 40, 50, 60, 70}, append([]int{}, sink.Items()...))
			assert.Equal(t, [][]int{{0, 1, 2, 3}, {3}, {4, 5, 6, 7}, {6}}, calls.get(), "the retries got the items' own values")
			envs := dlq.Envelopes()
			require.Len(t, envs, 1)
			assert.Equal(t, any(3), envs[0].Item)
			assert.Equal(t, deadletter.TypeOf(3), envs[0].ItemType)
		})
	}
}

// With ReuseSlice, the items of a slice after one that fails the node are
// settled after the restart with what the batch call returned, though f
// returned its own slice and the node gathers into it again.
func TestReuseSliceRestartKeepsTheBatchResults(t *testing.T) {
	t.Parallel()
	var (
		calls batchCalls
		addrs []uintptr
		once  sync.Once
	)
	src := pipelinetest.NewTrackedSource(ints(9)...)
	sink := &pipelinetest.Collector[int]{}
	b := pipeline.New("reuse-restart", pipeline.WithResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 1
	}))
	out := pipeline.MapBatch(b, "bulk", pipeline.Source(b, "src", src), 4, 0, inPlace(&calls, &addrs, func(v int) error {
		var err error
		if v == 1 {
			once.Do(func() { err = errors.New("fails the node once") })
		}
		return err
	}), pipeline.ReuseSlice())
	pipeline.Sink(b, "sink", out, sink)
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, timesTen(9), append([]int{}, sink.Items()...))
	assert.Equal(t, [][]int{{0, 1, 2, 3}, {1}, {4, 5, 6, 7}, {8}}, calls.get())
	assert.Equal(t, int64(1), nodeOf(t, res, "bulk").NodeRestarts)
	for i := range 9 {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
	}
}

// ForEachBatch takes ReuseSlice: each item is written once and delivered.
func TestReuseSliceForEachBatch(t *testing.T) {
	t.Parallel()
	const n = 11
	var (
		mu      sync.Mutex
		written []int
		addrs   = map[*int]bool{}
	)
	src := pipelinetest.NewTrackedSource(ints(n)...)
	b := pipeline.New("reuse-write")
	pipeline.ForEachBatch(b, "write", pipeline.Source(b, "src", src), 4, 0, func(_ context.Context, ins []int) []error {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, ins...)
		addrs[unsafe.SliceData(ins)] = true
		clear(ins) // the slice is the node's again once f returns
		return nil
	}, pipeline.ReuseSlice())
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, ints(n), written)
	assert.Len(t, addrs, 1, "every call got the same slice")
	assert.Equal(t, int64(n), nodeOf(t, res, "write").Out)
	for i := range n {
		assert.Equal(t, []node.Outcome{node.Delivered}, src.Outcomes()[i], "item %d", i)
	}
}

// Build refuses ReuseSlice on a node that calls no function on slices,
// naming the node and the option.
func TestReuseSliceBuildRefusesOtherNodes(t *testing.T) {
	t.Parallel()
	b := pipeline.New("reuse-build")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1), pipeline.ReuseSlice())
	out := pipeline.Transform(b, "double", src, node.TransformFunc[int, int](func(_ context.Context, v int) (int, error) { return 2 * v, nil }), pipeline.ReuseSlice())
	pipeline.Sink(b, "sink", pipeline.Batch(b, "batch", out, 4, 0, pipeline.ReuseSlice()), &pipelinetest.Collector[[]int]{})
	_, err := b.Build()
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	for _, name := range []string{"src", "double", "batch"} {
		assert.Contains(t, err.Error(), fmt.Sprintf(`node %q: ReuseSlice: a `, name))
	}
	assert.Contains(t, err.Error(), "only MapBatch and ForEachBatch do")
}
