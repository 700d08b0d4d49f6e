package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// keyedBuilder returns a builder whose failures are dead-lettered at once,
// with a recorder of its events.
func keyedBuilder(opts ...pipeline.Option) (*pipeline.Builder, *pipelinetest.Recorder) {
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("keys", append([]pipeline.Option{pipeline.WithObserver(rec),
		pipeline.WithDeadLetter(deadletter.NewMemory(1000)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		})}, opts...)...)
	return b, rec
}

// keyedSource adds a source of n orders keyed by their ids, ord-00 on.
func keyedBuilderSource(b *pipeline.Builder, name string, n int) pipeline.Stream[keyedOrder] {
	orders := make([]keyedOrder, n)
	for i := range orders {
		orders[i] = keyedOrder{fmt.Sprintf("ord-%02d", i), i}
	}
	return pipeline.Source(b, name, pipelinetest.NewSliceSource(orders...),
		pipeline.SourceKey(func(o keyedOrder) string { return o.id }))
}

var errBadOrder = resilience.MarkPermanent(errors.New("bad"))

func deadKeys(rec *pipelinetest.Recorder) []string {
	var keys []string
	for _, e := range pipelinetest.Of[observer.DeadLetterEvent](rec) {
		keys = append(keys, e.Key)
	}
	return keys
}

// An item of a batch is named by the first keyed item it holds and how
// many more: a batch of batches of 4 orders is "ord-00 and 3 more",
// counting orders, not batches.
func TestNestedBatchKeyCountsItems(t *testing.T) {
	t.Parallel()
	b, rec := keyedBuilder()
	inner := pipeline.Batch(b, "inner", keyedBuilderSource(b, "src", 4), 2, 0)
	outer := pipeline.Batch(b, "outer", inner, 2, 0)
	pipeline.ForEach(b, "sink", outer, func(context.Context, [][]keyedOrder) error { return errBadOrder })
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"ord-00 and 3 more"}, deadKeys(rec))
}

// A FlatMap over a batch may reorder or replace its items: its results
// share the batch's tracking, so an event names the batch, never another
// order at the same position, and no order that failed is reported
// delivered. Here the FlatMap reverses each batch of three.
func TestFlatMapOverBatchKeepsKeysWithTheirItems(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b, rec := keyedBuilder(m.opts...)
			src := pipelinetest.NewTrackedSource(keyedOrder{"ord-00", 0}, keyedOrder{"ord-01", 1}, keyedOrder{"ord-02", 2})
			in := pipeline.Source(b, "src", src, pipeline.SourceKey(func(o keyedOrder) string { return o.id }))
			batches := pipeline.Batch(b, "batch", in, 3, 0)
			reversed := pipeline.FlatMap(b, "reverse", batches, func(_ context.Context, os []keyedOrder) ([]keyedOrder, error) {
				out := slices.Clone(os)
				slices.Reverse(out)
				return out, nil
			})
			pipeline.ForEach(b, "sink", reversed, func(_ context.Context, o keyedOrder) error {
				if o.id == "ord-00" {
					return errBadOrder
				}
				return nil
			})
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			keys := deadKeys(rec)
			require.Len(t, keys, 1)
			assert.Contains(t, []string{"ord-00", "ord-00 and 2 more"}, keys[0],
				"the dead-lettered item is ord-00's order, not the one at its position in the batch")
			// The FlatMap's results share the batch's tracking: every order
			// of the batch reports the batch's fate, the most severe of its
			// results', and ord-00, which failed, is never reported
			// delivered.
			for i, o := range src.Outcomes() {
				assert.Equal(t, []node.Outcome{node.DeadLettered}, o, "ord-0%d's outcome", i)
			}
		})
	}
}

// forgivingSource emits every item and carries on when Emit refuses one,
// as a source that logs a bad record and reads on does.
type forgivingSource struct{ items []int }

func (s *forgivingSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, it := range s.items {
		_ = out.Emit(ctx, it)
	}
	return nil
}

// A SourceKey function that panics fails the run, even when the source
// carries on after Emit refused the item: the item is never lost
// without a trace.
func TestKeyPanicFailsTheRunWhateverTheSourceDoes(t *testing.T) {
	t.Parallel()
	b := pipeline.New("panics")
	col := &pipelinetest.Collector[int]{}
	pipeline.Sink(b, "sink", pipeline.Source(b, "src", &forgivingSource{items: []int{1, 2, 3}},
		pipeline.SourceKey(func(x int) string {
			if x == 2 {
				panic("no key")
			}
			return "k"
		})), col)
	_, err := build(t, b).Run(t.Context())
	if assert.Error(t, err, "the run succeeded; the sink got %v of 1, 2, 3", col.Items()) {
		assert.Contains(t, err.Error(), "the SourceKey function panicked")
	}
}
