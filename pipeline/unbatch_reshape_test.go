package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// unbatchAfter runs the tracked items through a Batch of all of them, a
// Map with f, an Unbatch and a sink that fails the items in fail
// (permanently, dead-lettered): it returns each item's outcomes and what
// the sink wrote.
func unbatchAfter(t *testing.T, items []string, f func([]string) []string, fail ...string) (map[int][]node.Outcome, []string) {
	t.Helper()
	src := pipelinetest.NewTrackedSource(items...)
	b := pipeline.New("unbatch-reshape", pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.DeadLetter
		}))
	batches := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), len(items), 0)
	mapped := pipeline.Map(b, "map", batches, func(_ context.Context, v []string) ([]string, error) { return f(v), nil })
	one := pipeline.Unbatch(b, "unbatch", mapped)
	sink := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, "write", one, node.SinkFunc[string](func(ctx context.Context, v string) error {
		if slices.Contains(fail, v) {
			return resilience.MarkPermanent(errors.New("refused: " + v))
		}
		return sink.Write(ctx, v)
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	return src.Outcomes(), sink.Items()
}

// A Map that sorts a batch in place before an Unbatch: the positions no
// longer say whose each item is, so no item may take another's fate. Here
// "b" is dead-lettered and "a" written; before, "b" (first in the batch)
// was reported Delivered, by "a"'s tracker, and "a" dead-lettered, so a
// broker would have acked the failed item and sent the written one again.
func TestUnbatchAfterASortNeverGivesAnItemAnothersFate(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func([]string) []string{
		"in place": func(v []string) []string { slices.Sort(v); return v },
		"a copy":   func(v []string) []string { s := slices.Clone(v); slices.Sort(s); return s },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			outcomes, wrote := unbatchAfter(t, []string{"b", "a"}, f, "b")
			assert.Equal(t, []string{"a"}, wrote)
			require.Len(t, outcomes[0], 1)
			assert.NotEqual(t, node.Delivered, outcomes[0][0], `"b" was dead-lettered, not delivered`)
			for i, o := range outcomes {
				assert.Len(t, o, 1, "item %d ends once", i)
			}
		})
	}
}

// Unchanged by the Map, or reordered, every item ends once; a batch that
// goes straight from Batch to Unbatch still gives each item its own fate.
func TestUnbatchWithoutAMapKeepsEachItemsOwnFate(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource("b", "a")
	b := pipeline.New("unbatch-own", pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.DeadLetter
		}))
	one := pipeline.Unbatch(b, "unbatch", pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, 0))
	pipeline.Sink(b, "write", one, node.SinkFunc[string](func(ctx context.Context, v string) error {
		if v == "b" {
			return resilience.MarkPermanent(errors.New("refused"))
		}
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, map[int][]node.Outcome{0: {node.DeadLettered}, 1: {node.Delivered}}, src.Outcomes())
}
