package progress_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// heldSource is a sized source of size tracked items that emits the first
// emit of them, closes emitted, and waits for its run to end or drain.
type heldSource struct {
	size, emit int
	tracked    bool
	emitted    chan struct{}
}

func (s *heldSource) Size() int64 { return int64(s.size) }

func (s *heldSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for i := range s.emit {
		var err error
		if s.tracked {
			err = out.EmitTracked(ctx, i, func(node.Outcome) {})
		} else {
			err = out.Emit(ctx, i)
		}
		if err != nil {
			return nil
		}
	}
	close(s.emitted)
	<-ctx.Done()
	return nil
}

// settledFrames runs a pipeline whose source emits emit of its size
// tracked items and whose sink "store" writes writes items, then holds the
// next until the run ends; ready tells when the rest of the graph is done
// with what it can do. It returns a frame drawn then, and one drawn after
// Drain.
func settledFrames(t *testing.T, size, emit int, tracked bool, writes int64, build func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])), ready <-chan struct{}) (line, drainLine string) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	b := pipeline.New("p")
	var n atomic.Int64
	blocked := make(chan struct{})
	src := &heldSource{size: size, emit: emit, tracked: tracked, emitted: make(chan struct{})}
	build(b, pipeline.Source[int](b, "read", src), func(s pipeline.Stream[int]) {
		pipeline.Sink(b, "store", s, node.SinkFunc[int](func(ctx context.Context, _ int) error {
			if n.Add(1) == writes+1 {
				close(blocked)
				<-ctx.Done()
			}
			return nil
		}))
	})
	p, err := b.Build()
	require.NoError(t, err)
	require.NoError(t, h.rep.UseStats(p))
	h.start()
	ctx, cancel := context.WithCancel(t.Context())
	run := pipelinetest.Start(ctx, p)
	<-src.emitted
	<-blocked
	if ready != nil {
		<-ready
	}
	h.tick()
	w := h.out.take()
	require.NotEmpty(t, w)
	line = w[len(w)-1]
	p.Drain()
	h.tick()
	w = h.out.take()
	require.NotEmpty(t, w)
	drainLine = w[len(w)-1]
	cancel()
	_, _ = run.Wait()
	return line, drainLine
}

// Settled % and the items left in a drain count the source's items whose
// fate is final end to end, when its items are tracked: through an
// Aggregate, a FlatMap and a broadcast, where counting what the sinks
// wrote would count windows, parts or copies.
func TestSettledCountsSourceItemsEndToEnd(t *testing.T) {
	t.Run("aggregate", func(t *testing.T) {
		// 350 emitted of 1,000, in windows of 10; 30 windows written:
		// 300 settled, 50 left.
		line, drainLine := settledFrames(t, 1_000, 350, true, 30, func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			agg := pipeline.Aggregate(b, "sum", src, func(int) int { return 0 }, pipeline.CountWindow(10),
				func() int { return 0 }, func(a, v int) int { return a + 1 })
			sink(pipeline.Map(b, "unwrap", agg, func(_ context.Context, w pipeline.Window[int, int]) (int, error) { return w.Value, nil }))
		}, nil)
		assert.Contains(t, line, "settled 30%")
		assert.Contains(t, drainLine, "draining 50 left")
	})
	t.Run("flatmap", func(t *testing.T) {
		// 5 emitted of 10, each in 10 parts; 20 parts written: 2 settled,
		// 3 left.
		line, drainLine := settledFrames(t, 10, 5, true, 20, func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			sink(pipeline.FlatMap(b, "explode", src, func(_ context.Context, v int) ([]int, error) { return make([]int, 10), nil }))
		}, nil)
		assert.Contains(t, line, "settled 20%")
		assert.Contains(t, drainLine, "draining 3 left")
	})
	t.Run("broadcast", func(t *testing.T) {
		// 12 emitted of 20 to two sinks; fast wrote 12, store 10: 10
		// settled (reached both), 2 left.
		fastDone := make(chan struct{})
		line, drainLine := settledFrames(t, 20, 12, true, 10, func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			var n atomic.Int64
			pipeline.Sink(b, "fast", src, node.SinkFunc[int](func(context.Context, int) error {
				if n.Add(1) == 12 {
					close(fastDone)
				}
				return nil
			}))
			sink(src)
		}, fastDone)
		assert.Contains(t, line, "settled 50%")
		assert.Contains(t, drainLine, "draining 2 left")
	})
	t.Run("none written", func(t *testing.T) {
		fastDone := make(chan struct{})
		// 2 emitted of 20; fast wrote both, store none: none settled.
		line, drainLine := settledFrames(t, 20, 2, true, 0, func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
			var n atomic.Int64
			pipeline.Sink(b, "fast", src, node.SinkFunc[int](func(context.Context, int) error {
				if n.Add(1) == 2 {
					close(fastDone)
				}
				return nil
			}))
			sink(src)
		}, fastDone)
		assert.Contains(t, line, "settled 0%")
		assert.Contains(t, drainLine, "draining 2 left")
	})
}

// Untracked items: the display falls back on counting where items end
// (published a little late): never more than settled, or than emitted.
func TestSettledEstimateForUntrackedItems(t *testing.T) {
	line, drainLine := settledFrames(t, 100, 12, false, 10, func(b *pipeline.Builder, src pipeline.Stream[int], sink func(pipeline.Stream[int])) {
		sink(src)
	}, nil)
	assert.Regexp(t, `settled (0|10)%`, line)
	assert.Regexp(t, `draining ([0-9]|1[0-2]) left`, drainLine)
}
