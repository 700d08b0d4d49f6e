package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A Keyed node never puts two free keys in one chunk while a worker would
// be left with none: with a few more keys than workers (3 on 2, 5 on 4,
// 9 on 8), the item of key 0 waits until key 1's item was handled, as a
// slow call would hold the rest of its chunk; the run ends only if key 1
// went to a worker of its own.
func TestKeyedGivesFreeKeysAWorkerEach(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ keys, workers int }{{3, 2}, {5, 4}, {9, 8}, {2, 2}, {1, 4}} {
		t.Run(fmt.Sprintf("%d-keys-%d-workers", c.keys, c.workers), func(t *testing.T) {
			t.Parallel()
			// A bound on a hang, not a measure: the run takes microseconds.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
				for i := range c.keys {
					if err := out.Emit(ctx, i); err != nil {
						return err
					}
				}
				return nil
			})
			second := make(chan struct{})
			b := pipeline.New("keyed-chunks")
			pipeline.ForEach(b, "store", pipeline.Source(b, "src", src), func(ctx context.Context, x int) error {
				switch {
				case x == 0 && c.keys > 1:
					select {
					case <-second:
					case <-ctx.Done():
						return ctx.Err()
					}
				case x == 1:
					close(second)
				}
				return nil
			}, pipeline.Keyed(c.workers, func(x int) int { return x }))
			res, err := build(t, b).Run(ctx)
			require.NoError(t, err, "key 1's item waited behind key 0's in one chunk while a worker idled")
			require.Equal(t, int64(c.keys), nodeOf(t, res, "store").Out)
		})
	}
}
