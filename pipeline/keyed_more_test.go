package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// Keyed with Parallel, in either order and with any n, or with Unordered,
// is a Build error.
func TestKeyedRefusesParallelAndUnordered(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]pipeline.NodeOption{
		{pipeline.Parallel(4), pipeline.Keyed(2, mod7)},
		{pipeline.Keyed(2, mod7), pipeline.Parallel(2)},
		{pipeline.Keyed(2, mod7), pipeline.Unordered()},
	} {
		b := pipeline.New("bad")
		s := pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1))
		pipeline.ForEach(b, "n", s, func(context.Context, int) error { return nil }, opts...)
		_, err := b.Build()
		assert.Error(t, err, "Keyed and Parallel given together must be a Build error")
	}
}

// Keyed(1, key) calls key too: a key that panics fails its item, which is
// dead-lettered.
func TestKeyedOneWorkerCallsTheKey(t *testing.T) {
	t.Parallel()
	dl := deadletter.NewMemory(10)
	b := pipeline.New("one", pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
		o.OnItemFailure = resilience.DeadLetter
	}))
	src := pipelinetest.NewTrackedSource(ints(20)...)
	var calls atomic.Int32
	key := func(x int) int {
		calls.Add(1)
		if x == 13 {
			panic("thirteen")
		}
		return x % 3
	}
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(context.Context, int) error { return nil }, pipeline.Keyed(1, key))
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	outcomes := once(t, src, 20)
	assert.NotZero(t, calls.Load(), "the key function is never called")
	assert.Equal(t, node.DeadLettered, outcomes[13], "item 13's key panicked")
}

// A worker keeps a key until its writer sent the key's last item. A keyed
// Filter that drops a hot key's items never fills the writer's batch; the
// worker must still hand over, at the end of a chunk, once a key it keeps
// has an item waiting, or that key would wait as long as the hot key has
// items.
func TestKeyedHeldKeyDoesNotStarveBehindAHotKey(t *testing.T) {
	t.Parallel()
	const (
		hot   = 0
		l2    = 200  // the second item of key "L"
		total = 6000 // items; all but 0 and l2 are of the hot key
	)
	key := func(x int) int {
		if x == 0 || x == l2 {
			return 1 // key L
		}
		return hot
	}
	var emitted atomic.Int64
	var sawL2 atomic.Bool
	var starved atomic.Int64
	b := pipeline.New("starve")
	src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range total {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
			emitted.Store(int64(i + 1))
		}
		return nil
	}))
	kept := pipeline.Filter(b, "filter", src, func(x int) bool {
		if key(x) != hot {
			if x == l2 {
				sawL2.Store(true)
			}
			return true
		}
		// Keep the hot key's lane from running dry: the source is well
		// ahead of the item handled (or done).
		for emitted.Load() < min(int64(x+300), total) {
			runtime.Gosched()
		}
		if x == l2+3000 && !sawL2.Load() {
			starved.Store(int64(x))
		}
		return false
	}, pipeline.Keyed(2, key))
	var got []int
	var mu sync.Mutex
	pipeline.ForEach(b, "sink", kept, func(_ context.Context, x int) error {
		mu.Lock()
		got = append(got, x)
		mu.Unlock()
		return nil
	})
	_, err := build(t, b).Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []int{0, l2}, got)
	assert.Zero(t, starved.Load(), "item %d of key L was not handled while the hot key's %d later items were", l2, 3000)
}

// A Keyed node does not hand a long wait over to its source's broker: the
// item would come back behind its key's later items. It waits in process,
// and its key keeps its order.
func TestKeyedWaitsInProcessInsteadOfHandingOff(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	br := newSimBroker(time.Minute, 0, 1, 2, 3, 4, 5)
	b := pipeline.New("handoff", pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.Constant(time.Hour)
	}))
	s := &scripted{script: map[int][]error{0: {wait(time.Hour)}}}
	work := pipeline.Transform(b, "work", pipeline.Source[delivery](b, "src", br), node.Transform[delivery, delivery](s),
		pipeline.Keyed(2, func(d delivery) int { return d.id % 2 }))
	var mu sync.Mutex
	var got []int
	pipeline.ForEach(b, "sink", work, func(_ context.Context, d delivery) error {
		mu.Lock()
		got = append(got, d.id)
		mu.Unlock()
		return nil
	})
	run := pipelinetest.Start(t.Context(), build(t, b))
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour)
	require.NoError(t, err)
	br.mu.Lock()
	assert.Empty(t, br.handOffs, "nothing was handed off")
	br.mu.Unlock()
	var even []int
	for _, id := range got {
		if id%2 == 0 {
			even = append(even, id)
		}
	}
	assert.True(t, slices.IsSorted(even), "key 0 left the node out of order: %v", even)
	assert.Equal(t, []int{0, 2, 4}, even)
}

// Stress: the idle path (layer 1 waits, so the worker hands its work
// over) on many items at once, with node restarts, tracked items, three
// keyed nodes in a row.
func TestKeyedStressRetriesAndRestarts(t *testing.T) {
	t.Parallel()
	const n = 3000
	for _, m := range modes {
		for _, keys := range []int{1, 7, 1000} {
			for _, restart := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/keys=%d/restart=%v", m.name, keys, restart), func(t *testing.T) {
					t.Parallel()
					for it := range seeds(1) {
						r := rand.New(rand.NewPCG(uint64(it), uint64(keys)))
						flaky := map[int]int{}
						boom := map[int]bool{}
						for i := range n {
							if r.IntN(5) == 0 {
								flaky[i] = 1 + r.IntN(3)
							}
							if restart && r.IntN(150) == 0 {
								boom[i] = true
							}
						}
						key := func(x int) int { return x % keys }
						watch := &keyWatch{active: map[int]bool{}}
						var fmu sync.Mutex
						clock := clockwork.NewFakeClock()
						b := pipeline.New("stress", append(m.opts, pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = 5
							o.ItemRetry.Backoff = resilience.Constant(time.Second)
							if restart {
								o.NodeRestart.MaxRestarts = 100
								o.NodeRestart.MaxReplayWindow = 16 + r.IntN(200)
								o.NodeRestart.Backoff = resilience.NoBackoff()
							}
						}))...)
						src := pipelinetest.NewTrackedSource(ints(n)...)
						work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
							watch.enter(key(x))
							defer watch.leave(key(x))
							fmu.Lock()
							fail := flaky[x] > 0
							flaky[x]--
							bang := boom[x]
							delete(boom, x)
							fmu.Unlock()
							if bang {
								return 0, errKeyedBoom
							}
							if fail {
								return 0, errFlaky
							}
							return x, nil
						}, pipeline.Keyed(4, key))
						spread := pipeline.FlatMap(b, "spread", work, func(_ context.Context, x int) ([]int, error) {
							return []int{x}, nil
						}, pipeline.Keyed(3, key))
						var mu sync.Mutex
						var got []int
						pipeline.ForEach(b, "sink", spread, func(_ context.Context, x int) error {
							mu.Lock()
							got = append(got, x)
							mu.Unlock()
							return nil
						}, pipeline.Keyed(2, key))
						run := pipelinetest.Start(t.Context(), build(t, b))
						res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Second)
						require.NoError(t, err)
						assert.Equal(t, repeat(node.Delivered, n), once(t, src, n))
						assertPerKeyOrder(t, got, key, "iteration %d", it)
						assert.Len(t, got, n)
						assert.Zero(t, watch.clash.Load(), "calls of one key overlapped")
						assert.Equal(t, int64(n), nodeOf(t, res, "work").In)
						assert.Equal(t, int64(n), nodeOf(t, res, "work").Out)
						assert.Equal(t, int64(n), nodeOf(t, res, "sink").Out)
					}
				})
			}
		}
	}
}

// Broadcast output, synchronous hand-over, Route, breaker
// pause: no hang, per-key order on every branch.
func TestKeyedBroadcastAndRoute(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, m := range append(modes, struct {
		name string
		opts []pipeline.Option
	}{"sync", []pipeline.Option{pipeline.WithHandOverBatch(1), pipeline.WithBuffer(0)}}) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for it := range 5 {
				r := rand.New(rand.NewPCG(uint64(it), 9))
				flaky := map[int]int{}
				for i := range n {
					if r.IntN(8) == 0 {
						flaky[i] = 1
					}
				}
				var fmu sync.Mutex
				b := pipeline.New("bc", append(m.opts, pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.NoBackoff()
				}))...)
				src := pipelinetest.NewTrackedSource(ints(n)...)
				work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
					fmu.Lock()
					fail := flaky[x] > 0
					flaky[x]--
					fmu.Unlock()
					if fail {
						return 0, errFlaky
					}
					return x, nil
				}, pipeline.Keyed(3, mod7))
				var mu sync.Mutex
				gots := make([][]int, 3)
				sink := func(i int) func(context.Context, int) error {
					return func(_ context.Context, x int) error {
						mu.Lock()
						gots[i] = append(gots[i], x)
						mu.Unlock()
						return nil
					}
				}
				pipeline.ForEach(b, "a", work, sink(0), pipeline.Keyed(2, mod7))
				br := pipeline.Route(b, "route", work, 2, func(x int) int { return x % 2 })
				pipeline.ForEach(b, "b0", br[0], sink(1), pipeline.Keyed(2, mod7))
				pipeline.ForEach(b, "b1", br[1], sink(2))
				_, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				assert.Equal(t, repeat(node.Delivered, n), once(t, src, n))
				for i := range gots {
					assertPerKeyOrder(t, gots[i], mod7, "branch %d", i)
				}
				assert.Len(t, gots[0], n)
				assert.Len(t, gots[1], n/2)
			}
		})
	}
}
