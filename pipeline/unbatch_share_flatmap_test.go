package pipeline_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Batch of batches, a FlatMap of the outer batch (identity: it hands on
// the inner batches, sharing the outer batch's tracker), then an Unbatch of
// each inner batch. The inner batch's tracker is the outer group (2
// parents: the inner groups); the FlatMap marks it reshaped, so the
// Unbatch does not hand each inner batch's items the inner groups by
// position ("a" [a,b]'s tracker, "b" [c,d]'s): "b", dead-lettered, is
// never reported Delivered.
func TestUnbatchAfterAFlatMapOfBatchesOfBatchesNeverCrossesFates(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource("a", "b", "c", "d")
	b := unbatchShareBuilder("unbatchShare-flatmap")
	inner := pipeline.Batch(b, "inner", pipeline.Source(b, "read", src), 2, 0)
	outer := pipeline.Batch(b, "outer", inner, 2, 0)
	flat := pipeline.FlatMap(b, "flat", outer, func(_ context.Context, v [][]string) ([][]string, error) { return v, nil })
	sink := unbatchShareFailingSink(b, "write", pipeline.Unbatch(b, "unbatch", flat), "b")
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a", "c", "d"}, sink.Items())
	out := src.Outcomes()
	for i := range 4 {
		require.Len(t, out[i], 1, "item %d ends once", i)
	}
	assert.NotEqual(t, node.Delivered, out[1][0], `"b" was dead-lettered, not written, yet reported Delivered`)
}

// Batch -> FlatMap that hands on one sorted copy of the batch -> Unbatch:
// the FlatMap marks the batch's tracker reshaped, so the Unbatch does not
// give the sorted items trackers by position: "b" (dead-lettered) is
// never reported Delivered.
func TestUnbatchAfterAFlatMapSortNeverGivesAnItemAnothersFate(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource("b", "a")
	b := unbatchShareBuilder("unbatchShare-flatmap-sort")
	batches := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, 0)
	flat := pipeline.FlatMap(b, "sort", batches, func(_ context.Context, v []string) ([][]string, error) {
		return [][]string{{v[1], v[0]}}, nil
	})
	sink := unbatchShareFailingSink(b, "write", pipeline.Unbatch(b, "unbatch", flat), "b")
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, sink.Items())
	out := src.Outcomes()
	require.Len(t, out[0], 1)
	assert.NotEqual(t, node.Delivered, out[0][0], `"b" was dead-lettered, not written, yet reported Delivered`)
}
