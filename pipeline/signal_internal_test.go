package pipeline

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
)

// A signal that comes once every node of the run finished drains
// nothing: RunUntilSignal then returns the run's own result.
func TestDrainRequestAfterTheRunEnded(t *testing.T) {
	t.Parallel()
	b := New("ended")
	Sink(b, "sink", Source(b, "source", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		return out.Emit(ctx, 1)
	})), node.SinkFunc[int](func(context.Context, int) error { return nil }))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)

	asked := &drainRequest{p: p, asked: make(chan struct{})}
	asked.ask()
	asked.attach(p.current.Load())
	assert.False(t, asked.drained(), "asked before the (ended) run attached")

	attached := &drainRequest{p: p, asked: make(chan struct{})}
	attached.attach(p.current.Load())
	attached.ask()
	assert.False(t, attached.drained(), "asked after")
	assert.False(t, p.Stats().Draining)
}
