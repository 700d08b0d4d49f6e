package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// gateSink is a dead-letter sink whose Write waits, once entered, until
// the test opens it.
type gateSink struct {
	entered chan struct{}
	open    chan struct{}
}

func (g *gateSink) Write(ctx context.Context, _ deadletter.Envelope) error {
	close(g.entered)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// "failed" in a graph counts the items that failed the node, not those
// skipped or dead-lettered: while an item is being written to the
// dead-letter sink, a graph of the run in progress shows no failure.
func TestGraphInProgressDoesNotShowADeadLetterAsFailed(t *testing.T) {
	t.Parallel()
	dl := &gateSink{entered: make(chan struct{}), open: make(chan struct{})}
	b := pipeline.New("inprogress", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3))
	tr := pipeline.Transform(b, "call", src, pipelinetest.FailAlways(errors.New("boom"), 2))
	pipeline.Sink(b, "store", tr, &pipelinetest.Collector[int]{})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	select {
	case <-dl.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the dead-letter sink was never written")
	}
	m := p.Graph().WithStats(p.Stats()).Mermaid()
	close(dl.open)
	_, err := run.Wait()
	require.NoError(t, err)
	var call string
	for _, l := range strings.Split(m, "\n") {
		if strings.Contains(l, `n1_call[`) {
			call = l
		}
	}
	assert.NotContains(t, call, "failed", "the item on its way to the dead-letter sink did not fail the node")
}

// A node that only skips items (its failure action) shows "skipped 3",
// no "failed", and not the red border of a node with failures.
func TestGraphSkipsAloneDoNotMarkTheNode(t *testing.T) {
	t.Parallel()
	b := pipeline.New("skips", pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 0
		o.OnItemFailure = resilience.Skip
	}))
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(ints(10)...))
	tr := pipeline.Transform(b, "call", src, pipelinetest.FailAlways(errors.New("boom"), 3, 5, 7))
	pipeline.Sink(b, "store", tr, &pipelinetest.Collector[int]{})
	p := build(t, b)
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	g := p.Graph().WithStats(p.Stats())
	m := g.Mermaid()
	require.Contains(t, m, "skipped 3")
	require.NotContains(t, m, "failed")
	assert.NotContains(t, m, "    style n1_call stroke:#c62828", "a node whose label shows no failure is not marked as failing")
	assert.NotContains(t, g.DOT(), `penwidth=3`)
}

// A breaker that is not closed shows in the node's counts, "circuit open"
// or "circuit half_open", and marks the node with the red border in both
// renderings; a closed one shows nothing.
func TestGraphShowsABreakerNotClosed(t *testing.T) {
	t.Parallel()
	b := pipeline.New("breaker")
	src := pipeline.Source(b, "read", pipelinetest.NewSliceSource(1))
	pipeline.ForEach(b, "store", src, func(context.Context, int) error { return nil })
	p := build(t, b)
	for _, state := range []resilience.CircuitState{resilience.CircuitClosed, resilience.CircuitOpen, resilience.CircuitHalfOpen} {
		s := p.Stats()
		s.Nodes[1].Circuit = state
		g := p.Graph().WithStats(s)
		m, dot := g.Mermaid(), g.DOT()
		if state == resilience.CircuitClosed {
			assert.NotContains(t, m, "circuit")
			assert.NotContains(t, m, "stroke:#c62828")
			assert.NotContains(t, dot, "penwidth=3")
			continue
		}
		assert.Contains(t, m, "circuit "+state.String())
		assert.Contains(t, m, "style n1_store stroke:#c62828")
		assert.Contains(t, dot, "circuit "+state.String())
		assert.Contains(t, dot, "penwidth=3")
	}
}
