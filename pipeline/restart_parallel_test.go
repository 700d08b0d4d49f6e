package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

func restartOnce(o *resilience.Options) {
	o.ItemRetry.MaxRetries = 0
	o.NodeRestart.MaxRestarts = 1
	o.NodeRestart.Backoff = resilience.NoBackoff()
}

// waitStat spins, yielding, until the node's published Out reaches n.
func waitStat(p *atomic.Pointer[pipeline.Pipeline], node string, n int64) {
	for {
		if pl := p.Load(); pl != nil {
			if s, _ := pl.Stats().Node(node); s.Out >= n {
				return
			}
		}
		runtimeGosched()
	}
}

// A parallel flat map restarts while its collector is part-way through
// handing over an item's children: the item must be handed over once and
// complete as Delivered, not be replayed on top of the children already
// sent.
func TestParallelRestartDoesNotSplitAnItem(t *testing.T) {
	t.Parallel()
	var pl atomic.Pointer[pipeline.Pipeline]
	gate := make(chan struct{})
	var xCalls, sinkCalls atomic.Int32
	b := pipeline.New("split", pipeline.WithHandOverBatch(1), pipeline.WithBuffer(0), pipeline.WithResilience(restartOnce))
	src := pipelinetest.NewTrackedSource("Y", "X")
	fm := pipeline.FlatMap(b, "fm", pipeline.Source[string](b, "src", src), func(ctx context.Context, v string) ([]string, error) {
		if v == "X" && xCalls.Add(1) == 1 {
			// The collector published Y1 as handed over: it is now blocked
			// handing over Y2 to the sink, which holds Y1.
			waitStat(&pl, "fm", 1)
			go func() {
				runtimeGosched()
				close(gate)
			}()
			return nil, errors.New("X failed")
		}
		return []string{v + "1", v + "2", v + "3"}, nil
	}, pipeline.Parallel(2))
	var mu sync.Mutex
	var got []string
	pipeline.Sink(b, "sink", fm, node.SinkFunc[string](func(_ context.Context, v string) error {
		if sinkCalls.Add(1) == 1 {
			<-gate
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, v)
		return nil
	}))
	p := build(t, b)
	pl.Store(p)
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"Y1", "Y2", "Y3", "X1", "X2", "X3"}, got, "every child once")
	assert.Equal(t, map[int][]node.Outcome{0: {node.Delivered}, 1: {node.Delivered}}, src.Outcomes(), "each item completes once, delivered")
}

// With batched hand-over, an unordered parallel node restarting while a
// worker waits to send a batch must not replay the items of that batch.
func TestParallelRestartDoesNotDuplicateAPendingBatch(t *testing.T) {
	t.Parallel()
	var pl atomic.Pointer[pipeline.Pipeline]
	gate := make(chan struct{})
	var xCalls, sinkCalls atomic.Int32
	b := pipeline.New("pending", pipeline.WithHandOverBatch(2), pipeline.WithBuffer(0), pipeline.WithResilience(restartOnce))
	tr := pipeline.Transform(b, "tr", pipeline.Source(b, "src", pipelinetest.NewSliceSource(ints(30)...)),
		node.TransformFunc[int, int](func(_ context.Context, v int) (int, error) {
			if v == 1 && xCalls.Add(1) == 1 {
				// The other worker fills the sink's channel and blocks
				// sending a batch; at least 4 items are published by then.
				waitStat(&pl, "tr", 4)
				go func() {
					runtimeGosched()
					close(gate)
				}()
				return 0, errors.New("fail once")
			}
			return v, nil
		}), pipeline.Parallel(2), pipeline.Unordered())
	var mu sync.Mutex
	seen := map[int]int{}
	pipeline.Sink(b, "sink", tr, node.SinkFunc[int](func(_ context.Context, v int) error {
		if sinkCalls.Add(1) == 1 {
			<-gate
		}
		mu.Lock()
		defer mu.Unlock()
		seen[v]++
		return nil
	}))
	p := build(t, b)
	pl.Store(p)
	res, err := p.Run(t.Context())
	require.NoError(t, err)
	for v := range 30 {
		assert.Equal(t, 1, seen[v], "item %d", v)
	}
	assert.Equal(t, int64(1), nodeOf(t, res, "tr").NodeRestarts)
	assert.Equal(t, nodeOf(t, res, "tr").Out, nodeOf(t, res, "sink").In)
}
