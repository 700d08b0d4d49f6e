package otel_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A gate fails item 50 in its first run, and holds item 10 in its second
// until released.
type gate struct {
	run              atomic.Int32
	reached, release chan struct{}
}

func (g *gate) Process(ctx context.Context, x int) (int, error) {
	switch {
	case g.run.Load() == 1 && x == 50:
		return 0, errBad
	case g.run.Load() == 2 && x == 10:
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return x, nil
}

func TestItemsInFlightCountsTheCurrentRunOnly(t *testing.T) {
	t.Parallel()
	g := &gate{reached: make(chan struct{}), release: make(chan struct{})}
	hold := make(chan struct{})
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		if g.run.Load() == 2 {
			select {
			case <-hold:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, v := range ints(64) {
			if err := out.Emit(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	o, reader := newObserver(t)
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("inflight", pipeline.WithObserver(observer.Multi(o, rec)))
	out := pipeline.Transform[int, int](b, "call", pipeline.Source(b, "src", src), g)
	pipeline.Sink(b, "sink", out, &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	const call, sink = "sluice.items.in_flight{inflight/call}", "sluice.items.in_flight{inflight/sink}"

	// Run 1 fails on item 50, leaving items the node took in and never
	// finished in its counters, which add up over runs.
	g.run.Store(1)
	_, err = p.Run(t.Context())
	require.ErrorIs(t, err, errBad)
	values := flat(collect(t, reader))
	assert.Zero(t, values[call], "nothing is in flight while the pipeline is not running")
	_, ok := values["sluice.items.in_flight{inflight/src}"]
	assert.False(t, ok, "a source has no items in flight")

	// Run 2: every node has started, the source waits: what the failed run
	// left is not counted.
	g.run.Store(2)
	run := pipelinetest.Start(t.Context(), p)
	_, err = pipelinetest.WaitFor[observer.NodeEvent](t.Context(), rec, 6+3)
	require.NoError(t, err)
	values = flat(collect(t, reader))
	assert.Zero(t, values[call])
	assert.Zero(t, values[sink])

	close(hold)
	<-g.reached
	v := flat(collect(t, reader))[call]
	assert.GreaterOrEqual(t, v, 0.0)
	assert.LessOrEqual(t, v, 64.0)
	close(g.release)
	_, err = run.Wait()
	require.NoError(t, err)
	assert.Zero(t, flat(collect(t, reader))[call])
}
