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

func unbatchShareBuilder(name string) *pipeline.Builder {
	return pipeline.New(name, pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			*o = resilience.Options{}
			o.OnItemFailure = resilience.DeadLetter
		}))
}

func unbatchShareFailingSink(b *pipeline.Builder, name string, in pipeline.Stream[string], fail string) *pipelinetest.Collector[string] {
	sink := &pipelinetest.Collector[string]{}
	pipeline.Sink(b, name, in, node.SinkFunc[string](func(ctx context.Context, v string) error {
		if v == fail {
			return resilience.MarkPermanent(errors.New("refused: " + v))
		}
		return sink.Write(ctx, v)
	}))
	return sink
}

// MapBatch over a stream of batches (each item a []string) whose function
// sorts each batch: MapBatch marks each batch's tracker reshaped as it
// hands the result on, so the Unbatch after it does not give items back
// trackers by position.
func TestUnbatchAfterAMapBatchSortNeverGivesAnItemAnothersFate(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource("b", "a")
	b := unbatchShareBuilder("unbatchShare-mapbatch")
	batches := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, 0)
	sorted := pipeline.MapBatch(b, "sort", batches, 1, 0, func(_ context.Context, ins [][]string) ([][]string, []error) {
		out := make([][]string, len(ins))
		for i, v := range ins {
			s := slices.Clone(v)
			slices.Sort(s)
			out[i] = s
		}
		return out, nil
	})
	sink := unbatchShareFailingSink(b, "write", pipeline.Unbatch(b, "unbatch", sorted), "b")
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, sink.Items())
	out := src.Outcomes()
	require.Len(t, out[0], 1)
	assert.NotEqual(t, node.Delivered, out[0][0], `"b" was dead-lettered, not written, yet reported Delivered`)
}

// A batch broadcast to two branches, handed straight to an Unbatch in one
// and Mapped in the other: the Map's mark is the batch's, so the direct
// branch's items may share the batch's tracker too (here, with the Map
// first, they do). "b", dead-lettered, is never reported Delivered; "a"
// ends once, Delivered or with the batch's fate.
func TestUnbatchBesideABroadcastMapNeverGivesAnItemAnothersFate(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource("b", "a")
	b := unbatchShareBuilder("unbatchShare-broadcast")
	batches := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, 0)
	mapped := make(chan struct{})
	// branch A: a Map of the batch (identity), then a sink of batches.
	ident := pipeline.Map(b, "ident", batches, func(_ context.Context, v []string) ([]string, error) { return v, nil })
	pipeline.Sink(b, "batches", ident, node.SinkFunc[[]string](func(context.Context, []string) error {
		close(mapped) // after the Map's deliver (reshape) pushed it
		return nil
	}))
	// branch B: the batch untouched, handed on item by item.
	wait := pipeline.Filter(b, "wait", batches, func([]string) bool { <-mapped; return true })
	sink := unbatchShareFailingSink(b, "write", pipeline.Unbatch(b, "unbatch", wait), "b")
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, sink.Items())
	out := src.Outcomes()
	assert.Equal(t, []node.Outcome{node.DeadLettered}, out[0], `"b"`)
	require.Len(t, out[1], 1, `"a" ends once`)
	assert.Contains(t, []node.Outcome{node.Delivered, node.DeadLettered}, out[1][0], `"a" was written by both branches: its own fate, or the batch's it shares`)
}

// Same as above without a Filter, fifty times: whatever the branches'
// timing, no item takes another's fate.
func TestUnbatchBesideABroadcastMapUnderAnyTiming(t *testing.T) {
	t.Parallel()
	for range 50 {
		src := pipelinetest.NewTrackedSource("b", "a")
		b := unbatchShareBuilder("unbatchShare-broadcast-race")
		batches := pipeline.Batch(b, "batch", pipeline.Source(b, "read", src), 2, 0)
		ident := pipeline.Map(b, "ident", batches, func(_ context.Context, v []string) ([]string, error) { return v, nil })
		pipeline.Sink(b, "batches", ident, node.SinkFunc[[]string](func(context.Context, []string) error { return nil }))
		sink := unbatchShareFailingSink(b, "write", pipeline.Unbatch(b, "unbatch", batches), "b")
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(t.Context())
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, sink.Items())
		out := src.Outcomes()
		if !assert.Len(t, out[1], 1, `"a" ends once`) || !assert.NotEqual(t, node.Delivered, out[0][0], `"b" was dead-lettered`) {
			return
		}
	}
}
