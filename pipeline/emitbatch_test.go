package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// burster is how a source finds the emitter's burst methods (BeginBatch,
// EndBatch), which node.Emitter does not have.
type burster interface {
	BeginBatch()
	EndBatch(ctx context.Context) error
}

// burstOutcomes records each item's burstOutcomes by item.
type burstOutcomes struct {
	mu  sync.Mutex
	got map[int][]node.Outcome
	all chan struct{} // closed once want items have an outcome
	n   int
}

func newBurstOutcomes(want int) *burstOutcomes {
	return &burstOutcomes{got: map[int][]node.Outcome{}, all: make(chan struct{}), n: want}
}

func (o *burstOutcomes) done(i int) func(node.Outcome) {
	return func(out node.Outcome) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.got[i] = append(o.got[i], out)
		if len(o.got) == o.n && len(o.got[i]) == 1 {
			close(o.all)
		}
	}
}

// once returns each of n items' one outcome, failing t when an item had
// none or more than one.
func (o *burstOutcomes) once(t *testing.T, n int) []node.Outcome {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]node.Outcome, n)
	for i := range n {
		require.Len(t, o.got[i], 1, "item %d must complete exactly once", i)
		out[i] = o.got[i][0]
	}
	return out
}

// Tracked items emitted in bursts between BeginBatch and EndBatch reach
// the sink in order, each with its own outcome exactly once, whatever the
// hand-over, with bursts longer and shorter than a hand-over batch.
func TestEmitBurstsTrackEachItem(t *testing.T) {
	t.Parallel()
	const n = 500
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			o := newBurstOutcomes(n)
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				b, ok := out.(burster)
				if !ok {
					return errors.New("the emitter has no BeginBatch and EndBatch")
				}
				i := 0
				for _, burst := range []int{1, 3, 64, 65, 200, 100, 67} {
					b.BeginBatch()
					for range burst {
						if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
							return err
						}
						i++
					}
					if err := b.EndBatch(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			b := pipeline.New("bursts", m.opts...)
			f := pipeline.Filter(b, "no-fives", pipeline.Source(b, "src", src), func(x int) bool { return x%5 != 0 })
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", f, sink)
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			var want []int
			outs := make([]node.Outcome, n)
			for i := range n {
				outs[i] = node.Delivered
				if i%5 == 0 {
					outs[i] = node.Filtered
					continue
				}
				want = append(want, i)
			}
			assert.Equal(t, want, sink.Items())
			assert.Equal(t, outs, o.once(t, n))
		})
	}
}

// A burst the source never ends is handed over all the same once the
// source is idle: here the source waits, inside its Run, for every item's
// outcome.
func TestAnUnendedBurstIsHandedOverWhenTheSourceIdles(t *testing.T) {
	t.Parallel()
	const n = 10
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			o := newBurstOutcomes(n)
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				out.(burster).BeginBatch()
				for i := range n {
					if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
						return err
					}
				}
				select {
				case <-o.all:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			b := pipeline.New("idle", m.opts...)
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), &pipelinetest.Collector[int]{})
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			for i, out := range o.once(t, n) {
				assert.Equal(t, node.Delivered, out, "item %d", i)
			}
		})
	}
}

// A burst still open when the source's Run returns is handed over as the
// source ends, and every item in it is delivered.
func TestABurstOpenAtTheEndOfRunIsDelivered(t *testing.T) {
	t.Parallel()
	const n = 30
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			o := newBurstOutcomes(n)
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				out.(burster).BeginBatch()
				for i := range n {
					if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
						return err
					}
				}
				return nil
			})
			b := pipeline.New("open", m.opts...)
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), sink)
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, ints(n), sink.Items())
			for i, out := range o.once(t, n) {
				assert.Equal(t, node.Delivered, out, "item %d", i)
			}
		})
	}
}

// An item refused inside a burst (its call's context ended) ends Failed
// at once, as with EmitTracked alone; the items the burst took before it
// are delivered, and EndBatch after the Run's end does nothing.
func TestAnItemRefusedInABurst(t *testing.T) {
	t.Parallel()
	const n, refused = 20, 12
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			o := newBurstOutcomes(n)
			var late burster
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				b := out.(burster)
				late = b
				b.BeginBatch()
				for i := range refused {
					if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
						return err
					}
				}
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				err := out.EmitTracked(cctx, refused, o.done(refused))
				assert.ErrorIs(t, err, context.Canceled)
				if err := b.EndBatch(ctx); err != nil {
					return err
				}
				for i := refused + 1; i < n; i++ {
					if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
						return err
					}
				}
				return nil
			})
			b := pipeline.New("refused", m.opts...)
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", pipeline.Source(b, "src", src), sink)
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			got := o.once(t, n)
			for i, out := range got {
				want := node.Delivered
				if i == refused {
					want = node.Failed
				}
				assert.Equal(t, want, out, "item %d", i)
			}
			assert.Len(t, sink.Items(), n-1)
			assert.NoError(t, late.EndBatch(t.Context()), "EndBatch after the run")
		})
	}
}

// Items of different keys that reach a Keyed node in one run (a burst
// handed over as one batch) are handled at once by its workers: the
// first, which waits for the second to be handled, does not hold it.
func TestKeyedHandlesTheKeysOfOneRunAtOnce(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			const n = 4
			o := newBurstOutcomes(n)
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				b := out.(burster)
				b.BeginBatch()
				for i := range n {
					if err := out.EmitTracked(ctx, i, o.done(i)); err != nil {
						return err
					}
				}
				return b.EndBatch(ctx)
			})
			second := make(chan struct{})
			b := pipeline.New("keyed", m.opts...)
			pipeline.ForEach(b, "store", pipeline.Source(b, "src", src), func(ctx context.Context, x int) error {
				switch x {
				case 0:
					select {
					case <-second:
					case <-ctx.Done():
						return ctx.Err()
					}
				case 1:
					close(second)
				}
				return nil
			}, pipeline.Keyed(2, func(x int) int { return x % 2 }))
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			for i, out := range o.once(t, n) {
				assert.Equal(t, node.Delivered, out, "item %d", i)
			}
		})
	}
}
