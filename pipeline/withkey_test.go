package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

type keyedOrder struct {
	id    string
	cents int
}

// An item's key, given at its source, names it in every event about it,
// after transforms changed its type, and in its dead-letter envelope; a
// batch is named by its first item; items with no key of their own fall
// back to their CorrelationID.
func TestSourceKeyNamesItemsInEvents(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, tracked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tracked=%v", m.name, tracked), func(t *testing.T) {
				t.Parallel()
				rec := &pipelinetest.Recorder{}
				dl := deadletter.NewMemory(100)
				b := pipeline.New("keys", append(m.opts, pipeline.WithObserver(rec), pipeline.WithDeadLetter(dl),
					pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 2
						o.ItemRetry.Backoff = resilience.NoBackoff()
						o.OnItemFailure = resilience.DeadLetter
					}))...)
				orders := make([]keyedOrder, 40)
				for i := range orders {
					orders[i] = keyedOrder{fmt.Sprintf("ord-%02d", i), i}
				}
				src := pipelinetest.NewSliceSource(orders...)
				src.Tracked = tracked
				in := pipeline.Source(b, "src", src, pipeline.SourceKey(func(o keyedOrder) string { return o.id }))
				// The type changes: the key stays with the item.
				cents := pipeline.Map(b, "cents", in, func(_ context.Context, o keyedOrder) (int, error) {
					if o.cents == 7 {
						return 0, errFlaky // retried, then dead-lettered
					}
					return o.cents, nil
				})
				kept := pipeline.Map(b, "skip", cents, func(_ context.Context, c int) (int, error) {
					if c == 9 {
						return 0, resilience.MarkPermanent(errors.New("nine"))
					}
					return c, nil
				}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
				batches := pipeline.Batch(b, "batch", kept, 5, 0)
				pipeline.ForEach(b, "sink", batches, func(_ context.Context, xs []int) error {
					for _, x := range xs {
						if x == 20 {
							return resilience.MarkPermanent(errors.New("twenty"))
						}
					}
					return nil
				})
				_, err := build(t, b).Run(t.Context())
				require.NoError(t, err)

				retries := pipelinetest.Of[observer.RetryEvent](rec)
				require.Len(t, retries, 2)
				for _, e := range retries {
					assert.Equal(t, "ord-07", e.Key)
				}
				exhausted := pipelinetest.Of[observer.RetryExhaustedEvent](rec)
				require.Len(t, exhausted, 1)
				assert.Equal(t, "ord-07", exhausted[0].Key)
				drops := pipelinetest.Of[observer.DropEvent](rec)
				require.Len(t, drops, 1)
				assert.Equal(t, "ord-09", drops[0].Key)
				dead := map[string]string{}
				for _, e := range pipelinetest.Of[observer.DeadLetterEvent](rec) {
					dead[e.Node] = e.Key
				}
				assert.Equal(t, "ord-07", dead["cents"])
				assert.True(t, strings.HasPrefix(dead["sink"], "ord-"), dead["sink"])
				assert.True(t, strings.HasSuffix(dead["sink"], " and 4 more"), dead["sink"])
				ids := map[string]string{}
				for _, env := range dl.Envelopes() {
					ids[env.OriginNode] = env.CorrelationID
				}
				assert.Equal(t, "ord-07", ids["cents"], "the envelope names the item by its key")
				assert.Equal(t, dead["sink"], ids["sink"])
				if tracked {
					outcomes := src.Outcomes()
					assert.Equal(t, []node.Outcome{node.DeadLettered}, outcomes[7])
					assert.Equal(t, []node.Outcome{node.Skipped}, outcomes[9])
					assert.Equal(t, []node.Outcome{node.Delivered}, outcomes[0])
				}
			})
		}
	}
}

type correlatedInt int

func (c correlatedInt) CorrelationID() string { return fmt.Sprintf("c%d", int(c)) }

// Without SourceKey, an item's own CorrelationID names it in events.
func TestEventsUseCorrelationIDWithoutKey(t *testing.T) {
	t.Parallel()
	rec := &pipelinetest.Recorder{}
	b := pipeline.New("corr", pipeline.WithObserver(rec), pipeline.WithDeadLetter(deadletter.NewMemory(10)),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		}))
	pipeline.ForEach(b, "sink", pipeline.Source(b, "src", pipelinetest.NewSliceSource[correlatedInt](1, 2, 3)),
		func(_ context.Context, c correlatedInt) error {
			if c == 2 {
				return errors.New("two")
			}
			return nil
		})
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	dead := pipelinetest.Of[observer.DeadLetterEvent](rec)
	require.Len(t, dead, 1)
	assert.Equal(t, "c2", dead[0].Key)
}

// SourceKey is checked at Build, naming the node; a key function that
// panics fails the run, naming it.
func TestSourceKeyErrors(t *testing.T) {
	t.Parallel()
	b := pipeline.New("bad")
	src := pipeline.Source(b, "src", pipelinetest.NewSliceSource(1, 2), pipeline.SourceKey(func(s string) string { return s }))
	pipeline.ForEach(b, "sink", src, func(context.Context, int) error { return nil }, pipeline.SourceKey(func(int) string { return "" }))
	b2 := pipeline.New("nil")
	pipeline.ForEach(b2, "sink", pipeline.Source(b2, "src", pipelinetest.NewSliceSource(1), pipeline.SourceKey[int](nil)),
		func(context.Context, int) error { return nil })
	_, err := b.Build()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "src": SourceKey: the source emits int: the key function must be a func(int) string, not func(string) string`)
	assert.Contains(t, err.Error(), `node "sink": SourceKey: only a source gives its items keys, not a sink`)
	_, err = b2.Build()
	assert.ErrorContains(t, err, `node "src": SourceKey: the key function is nil`)

	b3 := pipeline.New("panics")
	pipeline.ForEach(b3, "sink", pipeline.Source(b3, "src", pipelinetest.NewSliceSource(1, 2, 3),
		pipeline.SourceKey(func(x int) string {
			if x == 2 {
				panic("no key")
			}
			return "k"
		})), func(context.Context, int) error { return nil })
	_, err = build(t, b3).Run(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the SourceKey function panicked")
	assert.Contains(t, err.Error(), `node "src"`)
}
