package progress_test

import (
	"context"
	"fmt"
	"strings"
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

// reviewFrame runs a real pipeline whose sink writes `writes` items and
// then blocks; it returns one compact line drawn while the sink blocks,
// and optionally one drawn after Drain was called.
func reviewFrame(t *testing.T, build func(b *pipeline.Builder, sink func(pipeline.Stream[int])), writes int64, drain bool) (string, string, *pipeline.Pipeline) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	b := pipeline.New("p")
	var n atomic.Int64
	release := make(chan struct{})
	blocked := make(chan struct{})
	build(b, func(s pipeline.Stream[int]) {
		pipeline.Sink(b, "store", s, node.SinkFunc[int](func(ctx context.Context, _ int) error {
			if n.Add(1) == writes+1 {
				close(blocked)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}))
	})
	p, err := b.Build()
	require.NoError(t, err)
	require.NoError(t, h.rep.UseStats(p))
	h.start()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	run := pipelinetest.Start(ctx, p)
	<-blocked
	time.Sleep(300 * time.Millisecond) // a real run: let upstream fill its buffers and publish
	h.tick()
	w := h.out.take()
	require.NotEmpty(t, w)
	first := w[len(w)-1]
	var second string
	if drain {
		p.Drain()
		time.Sleep(100 * time.Millisecond)
		h.tick()
		w = h.out.take()
		require.NotEmpty(t, w)
		second = w[len(w)-1]
	}
	close(release)
	_, _ = run.Wait()
	return first, second, p
}

// An Aggregate of 10 items a window: the sink has written 300 windows,
// that is 3000 of the 10000 items have settled; the display says 3 %.
func TestReviewSettledWithAggregate(t *testing.T) {
	items := make([]int, 10_000)
	line, drainLine, _ := reviewFrame(t, func(b *pipeline.Builder, sink func(pipeline.Stream[int])) {
		src := pipeline.Source[int](b, "read", pipelinetest.NewSliceSource(items...))
		agg := pipeline.Aggregate(b, "sum", src, func(int) int { return 0 }, pipeline.CountWindow(10),
			func() int { return 0 }, func(a, v int) int { return a + 1 })
		sink(pipeline.Map(b, "unwrap", agg, func(_ context.Context, w pipeline.Window[int, int]) (int, error) { return w.Value, nil }))
	}, 300, true)
	t.Log(line)
	t.Log(drainLine)
	assert.Regexp(t, `settled [23][0-9]%`, line, "300 windows of 10 written: about 30%% settled")
	assert.NotRegexp(t, `draining [0-9]{4,} left`, drainLine, "the drain counts every item absorbed into a written window as left")
}

// A FlatMap into 10 parts: the sink wrote 200 parts (20 items whole);
// settled is capped at what the source emitted, so it reads as the
// source's progress, and a drain says 0 left while parts are in flight.
func TestReviewSettledWithFlatMap(t *testing.T) {
	items := make([]int, 10_000)
	line, drainLine, p := reviewFrame(t, func(b *pipeline.Builder, sink func(pipeline.Stream[int])) {
		src := pipeline.Source[int](b, "read", pipelinetest.NewSliceSource(items...))
		sink(pipeline.FlatMap(b, "explode", src, func(_ context.Context, v int) ([]int, error) { return make([]int, 10), nil }))
	}, 200, true)
	t.Log(line)
	t.Log(drainLine)
	st := p.Stats()
	t.Log(fmt.Sprintf("read out %d, store out %d", st.Nodes[0].Out, st.Nodes[2].Out))
	assert.False(t, strings.Contains(drainLine, "draining 0 left"), "a drain with parts in flight says 0 left")
}

// A broadcast to two sinks, one of which blocks after 10 items: only 10
// items have settled (reached both ends).
func TestReviewSettledWithBroadcast(t *testing.T) {
	items := make([]int, 10_000)
	line, drainLine, p := reviewFrame(t, func(b *pipeline.Builder, sink func(pipeline.Stream[int])) {
		src := pipeline.Source[int](b, "read", pipelinetest.NewSliceSource(items...))
		pipeline.Sink(b, "fast", src, node.SinkFunc[int](func(context.Context, int) error { return nil }))
		sink(src)
	}, 10, true)
	t.Log(line)
	t.Log(drainLine)
	st := p.Stats()
	t.Log(fmt.Sprintf("read out %d", st.Nodes[0].Out))
	assert.Contains(t, line, "settled 0%", "store wrote none: nothing reached both ends")
	assert.NotContains(t, drainLine, "draining 0 left")
}
