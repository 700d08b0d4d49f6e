package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// clocked records the clocks SetClock gave it, and the last one it had
// when the node was first called in each run.
type clocked struct {
	mu     sync.Mutex
	given  []clockwork.Clock
	atCall []clockwork.Clock
	called bool
}

func (c *clocked) SetClock(clock clockwork.Clock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.given = append(c.given, clock)
	c.called = false
}

// call notes the clock the node holds at its first call of a run.
func (c *clocked) call() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.called && len(c.given) > 0 {
		c.atCall = append(c.atCall, c.given[len(c.given)-1])
	}
	c.called = true
}

type clockedSource struct{ clocked }

func (s *clockedSource) Run(ctx context.Context, out node.Emitter[int]) error {
	s.call()
	for i := range 3 {
		if err := out.Emit(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

type clockedTransform struct{ clocked }

func (t *clockedTransform) Process(_ context.Context, v int) (int, error) {
	t.call()
	return v * 2, nil
}

// clockedSink is a sink wrapped in a node.Wrapper, which the pipeline
// looks through.
type clockedSink struct {
	clocked
	out pipelinetest.Collector[int]
}

func (s *clockedSink) Write(ctx context.Context, v int) error {
	s.call()
	return s.out.Write(ctx, v)
}

type wrappedSink struct{ inner *clockedSink }

func (w wrappedSink) Write(ctx context.Context, v int) error { return w.inner.Write(ctx, v) }
func (w wrappedSink) Unwrap() any                            { return w.inner }

// Every node that implements pipeline.ClockSetter, a source, a transform
// and a sink behind a node.Wrapper, gets the pipeline's clock at the
// start of each run, before its first call; a node without it is left
// alone, and a pipeline without WithClock gives the real clock.
func TestClockSetterGetsThePipelinesClockEachRun(t *testing.T) {
	fake := clockwork.NewFakeClock()
	src, tr, sink := &clockedSource{}, &clockedTransform{}, &clockedSink{}
	b := pipeline.New("clocks", pipeline.WithClock(fake))
	doubled := pipeline.Transform(b, "double", pipeline.Source(b, "read", src), tr)
	pipeline.Sink(b, "write", doubled, wrappedSink{inner: sink})
	p, err := b.Build()
	require.NoError(t, err)
	for range 2 {
		_, err := p.Run(context.Background())
		require.NoError(t, err)
	}
	for name, c := range map[string]*clocked{"source": &src.clocked, "transform": &tr.clocked, "sink": &sink.clocked} {
		assert.Equal(t, []clockwork.Clock{fake, fake}, c.given, "%s: SetClock once per run", name)
		assert.Equal(t, []clockwork.Clock{fake, fake}, c.atCall, "%s: the clock was set before its first call of each run", name)
	}
	assert.Equal(t, []int{0, 2, 4, 0, 2, 4}, sink.out.Items())

	realSrc := &clockedSource{}
	b = pipeline.New("real")
	pipeline.Sink(b, "write", pipeline.Source(b, "read", realSrc), &pipelinetest.Collector[int]{})
	p, err = b.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, len(realSrc.given))
	_, isFake := realSrc.given[0].(*clockwork.FakeClock)
	assert.False(t, isFake, "without WithClock, the real clock")
	assert.NotNil(t, realSrc.given[0])
}

type panickySetter struct{ ran bool }

func (p *panickySetter) SetClock(clockwork.Clock) { panic("no clock for me") }
func (p *panickySetter) Run(context.Context, node.Emitter[int]) error {
	p.ran = true
	return nil
}

// A SetClock that panics fails the run, naming the node, before any node
// starts.
func TestClockSetterPanicFailsTheRunBeforeItStarts(t *testing.T) {
	src := &panickySetter{}
	b := pipeline.New("panics", pipeline.WithClock(clockwork.NewFakeClock()))
	pipeline.Sink(b, "write", pipeline.Source(b, "read", src), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	var ne *pipeline.NodeError
	require.True(t, errors.As(err, &ne), "a *NodeError: %v", err)
	assert.Equal(t, "read", ne.Node)
	assert.ErrorContains(t, err, "SetClock")
	assert.ErrorContains(t, err, "no clock for me")
	assert.False(t, src.ran, "no node started")
}
