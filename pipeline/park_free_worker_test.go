package pipeline_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// later closes all once items 1 to n-1 each had their first call.
type later struct {
	mu   sync.Mutex
	left int
	all  chan struct{}
}

func (l *later) before(_ context.Context, x, call int) error {
	if x == 0 || call != 1 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left--; l.left == 0 {
		close(l.all)
	}
	return nil
}

// On a node of two workers, an item that waits an hour parks and keeps no
// other item from a worker: with the clock standing still, every later
// item is called, and, unless the node is ordered, delivered. Item 0 is
// delivered once the hour passed, an ordered node's output in input order.
// This holds for each node kind that parks, for per-item and batched
// hand-over, and with a replay window (items dealt one by one).
func TestParkedItemKeepsNoItemFromTheFreeWorker(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name    string
		ordered bool
		opts    []pipeline.NodeOption
	}{
		{"unordered", false, []pipeline.NodeOption{pipeline.Parallel(2), pipeline.Unordered()}},
		{"ordered", true, []pipeline.NodeOption{pipeline.Parallel(2)}},
		{"keyed", false, []pipeline.NodeOption{pipeline.Keyed(2, func(x int) int { return x })}},
	}
	handOvers := []struct {
		name string
		opts []pipeline.Option
	}{
		{"batched", nil},
		{"per-item", []pipeline.Option{pipeline.WithHandOverBatch(1)}},
	}
	for _, k := range kinds {
		for _, h := range handOvers {
			for _, windowed := range []bool{false, true} {
				name := k.name + "/" + h.name
				if windowed {
					name += "/replay-window"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					const n = 9
					clock := clockwork.NewFakeClock()
					start := clock.Now()
					l := &later{left: n - 1, all: make(chan struct{})}
					w := &waiter{waits: map[int]time.Duration{0: time.Hour}, before: l.before}
					c := newCounter(n - 1)
					b := pipeline.New("park", append([]pipeline.Option{pipeline.WithClock(clock),
						pipeline.WithResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = 1
							o.ItemRetry.Backoff = resilience.Constant(time.Second)
							if windowed {
								o.NodeRestart.MaxRestarts = 1
								o.NodeRestart.Backoff = resilience.NoBackoff()
								o.NodeRestart.MaxReplayWindow = 64
							}
						})}, h.opts...)...)
					out := pipeline.Transform[int, int](b, "call", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(ints(n)...)), w, k.opts...)
					pipeline.Sink(b, "sink", out, c)
					run := pipelinetest.Start(t.Context(), build(t, b))
					await(t, l.all, "the first calls of the items after the parked one")
					if !k.ordered {
						await(t, c.reached, "the items after the parked one")
					}
					if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
						t.Fatal(err)
					}
					if now := clock.Now(); !now.Equal(start) {
						t.Fatalf("the clock moved by %v", now.Sub(start))
					}
					if calls := w.callsOf(0); calls != 1 {
						t.Fatalf("item 0 was called %d times before its wait ended, want 1", calls)
					}
					got := c.items()
					if k.ordered && len(got) != 0 {
						t.Fatalf("%d items overtook the parked first one: %v", len(got), got)
					}
					if !k.ordered && (len(got) != n-1 || slices.Contains(got, 0)) {
						t.Fatalf("delivered %v while item 0 waited; want items 1 to %d", got, n-1)
					}
					clock.Advance(time.Hour)
					res, err := run.Wait()
					if err != nil {
						t.Fatal(err)
					}
					got = c.items()
					if k.ordered && !slices.Equal(got, ints(n)) {
						t.Fatalf("output %v, want input order", got)
					}
					if !k.ordered && (len(got) != n || got[n-1] != 0) {
						t.Fatalf("output %v, want items 1 to %d, then 0", got, n-1)
					}
					if s := nodeOf(t, res, "call"); s.ItemRetries != 1 || s.Out != n {
						t.Fatalf("call: %d retries, %d out; want 1, %d", s.ItemRetries, s.Out, n)
					}
				})
			}
		}
	}
}
