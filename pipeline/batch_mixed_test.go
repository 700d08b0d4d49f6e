package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Tracked and untracked slices, interleaved, through Unbatch, MapBatch
// and Batch: the edges recycle their slices uncleared, so a slice that
// carried tracked items is filled next with untracked ones, whose values
// are set alone. Each tracked slice must report its fate once, Delivered,
// and every item arrive once, whatever the run's sizes (a slice of one,
// fewer than a hand-over, more). It does not catch a stale tracker left
// in a recycled slice (a tracker reports its fate once, so a second report
// on a settled one is dropped): TestPushValsDropsTheTrackersOfARecycledSlice
// does.
func TestTrackedAndUntrackedSlicesKeepTheirOwnFates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ slices, per, size int }{
		{40, 1, 4}, {40, 7, 16}, {30, 33, 64}, {12, 100, 256},
	} {
		t.Run(fmt.Sprintf("slices=%d,per=%d,size=%d", c.slices, c.per, c.size), func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				outcomes = map[int][]node.Outcome{}
			)
			b := pipeline.New("mixed")
			src := pipeline.Source(b, "src", node.SourceFunc[[]int](func(ctx context.Context, out node.Emitter[[]int]) error {
				for k := range c.slices {
					s := make([]int, c.per)
					for j := range s {
						s[j] = k*c.per + j
					}
					if k%3 != 0 {
						if err := out.Emit(ctx, s); err != nil {
							return err
						}
						continue
					}
					if err := out.EmitTracked(ctx, s, func(o node.Outcome) {
						mu.Lock()
						defer mu.Unlock()
						outcomes[k] = append(outcomes[k], o)
					}); err != nil {
						return err
					}
				}
				return nil
			}))
			items := pipeline.Unbatch(b, "items", src)
			dbl := pipeline.MapBatch(b, "double", items, c.size, 0, func(_ context.Context, in []int) ([]int, []error) {
				for i := range in {
					in[i] *= 2
				}
				return in, nil
			}, pipeline.ReuseSlice())
			again := pipeline.Unbatch(b, "again", pipeline.Batch(b, "slices", dbl, c.size, 0))
			sink := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", again, sink)
			p, err := b.Build()
			require.NoError(t, err)
			_, err = pipelinetest.Start(t.Context(), p).Wait()
			require.NoError(t, err)

			got := sink.Items()
			slices.Sort(got)
			want := make([]int, c.slices*c.per)
			for i := range want {
				want[i] = 2 * i
			}
			assert.Equal(t, want, got)
			mu.Lock()
			defer mu.Unlock()
			for k := 0; k < c.slices; k += 3 {
				assert.Equal(t, []node.Outcome{node.Delivered}, outcomes[k], "slice %d", k)
			}
			assert.Equal(t, (c.slices+2)/3, len(outcomes), "only tracked slices report")
		})
	}
}
