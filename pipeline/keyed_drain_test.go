package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// A heldSource emits its items, closes emitted, then waits for the drain:
// a consumer that has nothing more to read.
type heldSource struct {
	items   []int
	emitted chan struct{}
}

func (s *heldSource) Run(ctx context.Context, out node.Emitter[int]) error {
	for _, it := range s.items {
		if err := out.Emit(ctx, it); err != nil {
			return err
		}
	}
	close(s.emitted)
	<-ctx.Done()
	return context.Cause(ctx)
}

// A drain of a Keyed node waits for the items already read, and a key's
// items are handled one at a time: when each of one key's items fails
// once and waits its backoff, the drain waits those backoffs one after
// another, one per item queued behind the key (6 s for 6 items here),
// while the same items under 6 keys wait theirs side by side (1 s). This
// is what made the Kafka sample slow to end on SIGTERM with -flaky 20 and
// 20 customers: every flaky order was one customer's, and up to 256 of
// them (the source's MaxInFlight) were queued behind that key, 50 ms each.
func TestKeyedDrainWaitsAKeysBackoffsInTurn(t *testing.T) {
	t.Parallel()
	const n = 6
	for _, v := range []struct {
		name   string
		key    func(int) int
		parked int // items parked when every item was read
		want   time.Duration
	}{
		{"one key", func(int) int { return 0 }, 1, n * time.Second},
		{"a key each", func(i int) int { return i }, n, time.Second},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClock()
			var mu sync.Mutex
			calls := map[int]int{}
			flaky := func(_ context.Context, i int) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				if calls[i]++; calls[i] == 1 {
					return 0, resilience.MarkTransient(errors.New("busy"))
				}
				return i, nil
			}
			b := pipeline.New("keyed-drain", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Constant(time.Second)
				}))
			src := &heldSource{items: seq(1, n), emitted: make(chan struct{})}
			out := pipeline.Map(b, "price", pipeline.Source[int](b, "src", src), flaky, pipeline.Keyed(8, v.key))
			col := &pipelinetest.Collector[int]{}
			pipeline.Sink(b, "sink", out, col)
			p := build(t, b)
			run := pipelinetest.Start(t.Context(), p)
			await(t, src.emitted, "every item emitted")
			require.NoError(t, clock.BlockUntilContext(t.Context(), v.parked), "the first items park")
			require.True(t, p.Drain())
			start := clock.Now()
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
			require.NoError(t, err)
			assert.Equal(t, v.want, clock.Since(start), "the drain's wait")
			assert.Equal(t, n, col.Len())
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i <= n; i++ {
				assert.Equal(t, 2, calls[i], "item %d", i)
			}
		})
	}
}
