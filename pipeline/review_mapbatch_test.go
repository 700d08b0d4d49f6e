package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Review: runs of 0..20 results per item, tracked and untracked items
// interleaved in several patterns, through FlatMap (pushVals for the
// untracked ones) then MapBatch with ReuseSlice (pushVals again) then
// Batch and Unbatch, at hand-over batches that the runs straddle, fill
// exactly and overflow. Every result arrives once, and every tracked item
// reports one fate, its own: Filtered for a run of 0, else Delivered.
func TestReviewMixedRunsEveryLengthKeepTheirFates(t *testing.T) {
	t.Parallel()
	for _, hand := range []int{2, 3, 8, 9, 16, 21} {
		for _, every := range []int{1, 2, 5, 7} {
			t.Run(fmt.Sprintf("hand=%d,tracked-every=%d", hand, every), func(t *testing.T) {
				t.Parallel()
				const items = 300
				var (
					mu       sync.Mutex
					outcomes = map[int][]node.Outcome{}
					early    []int
				)
				sink := &pipelinetest.Collector[string]{}
				b := pipeline.New("review-mixed", pipeline.WithHandOverBatch(hand))
				src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
					for k := range items {
						if k%every != 0 {
							if err := out.Emit(ctx, k); err != nil {
								return err
							}
							continue
						}
						if err := out.EmitTracked(ctx, k, func(o node.Outcome) {
							// A fate fires only once each of the
							// item's results reached the sink: a
							// stale tracker settled by another item
							// would fire it early.
							have := 0
							for _, v := range sink.Items() {
								if n, err := strconv.Atoi(v[1:]); err == nil && n/100 == k {
									have++
								}
							}
							mu.Lock()
							defer mu.Unlock()
							if have != k%21 {
								early = append(early, k)
							}
							outcomes[k] = append(outcomes[k], o)
						}); err != nil {
							return err
						}
					}
					return nil
				}))
				// item k becomes k%21 strings (values with pointers).
				fm := pipeline.FlatMap(b, "fan", src, func(_ context.Context, k int) ([]string, error) {
					out := make([]string, k%21)
					for j := range out {
						out[j] = strconv.Itoa(k*100 + j)
					}
					return out, nil
				})
				mb := pipeline.MapBatch(b, "tag", fm, hand, 0, func(_ context.Context, in []string) ([]string, []error) {
					for i := range in {
						in[i] = "x" + in[i]
					}
					return in, nil
				}, pipeline.ReuseSlice())
				again := pipeline.Unbatch(b, "again", pipeline.Batch(b, "slices", mb, hand, 0))
				pipeline.Sink(b, "sink", again, sink)
				p, err := b.Build()
				require.NoError(t, err)
				_, err = pipelinetest.Start(t.Context(), p).Wait()
				require.NoError(t, err)

				var want []string
				for k := range items {
					for j := range k % 21 {
						want = append(want, "x"+strconv.Itoa(k*100+j))
					}
				}
				got := slices.Clone(sink.Items())
				slices.Sort(want)
				slices.Sort(got)
				assert.Equal(t, want, got)
				mu.Lock()
				defer mu.Unlock()
				for k := 0; k < items; k += every {
					fate := node.Delivered
					if k%21 == 0 {
						fate = node.Filtered
					}
					assert.Equal(t, []node.Outcome{fate}, outcomes[k], "item %d", k)
				}
				assert.Equal(t, (items+every-1)/every, len(outcomes), "only tracked items report")
				assert.Empty(t, early, "items whose fate fired before all their results were delivered")
			})
		}
	}
}
