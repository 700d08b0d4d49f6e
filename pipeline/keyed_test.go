package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

func mod7(x int) int { return x % 7 }

// assertPerKeyOrder checks that the items of each key of got are in
// increasing order.
func assertPerKeyOrder[K comparable](t *testing.T, got []int, key func(int) K, msg string, args ...any) {
	t.Helper()
	last := map[K]int{}
	for _, v := range got {
		k := key(v)
		if prev, ok := last[k]; ok && prev >= v {
			assert.Failf(t, "per-key order", "key %v: %d after %d; "+msg, append([]any{k, v, prev}, args...)...)
			return
		}
		last[k] = v
	}
}

// keyWatch fails the test when two calls of one key overlap.
type keyWatch struct {
	mu     sync.Mutex
	active map[int]bool
	clash  atomic.Int32
}

func (w *keyWatch) enter(k int) {
	w.mu.Lock()
	if w.active[k] {
		w.clash.Add(1)
	}
	w.active[k] = true
	w.mu.Unlock()
}

func (w *keyWatch) leave(k int) {
	w.mu.Lock()
	delete(w.active, k)
	w.mu.Unlock()
}

// Items of one key are handled one at a time, in arrival order, and leave
// the node in that order, through transient failures, a flat map and a
// keyed sink; every item completes once, delivered.
func TestKeyedKeepsEachKeysOrder(t *testing.T) {
	t.Parallel()
	const n = 3000
	for _, m := range modes {
		for _, keys := range []int{1, 7, 1000} {
			t.Run(fmt.Sprintf("%s/keys=%d", m.name, keys), func(t *testing.T) {
				t.Parallel()
				for it := range seeds(1) {
					r := rand.New(rand.NewPCG(uint64(it), uint64(keys)))
					flaky := map[int]int{}
					for i := range n {
						if r.IntN(10) == 0 {
							flaky[i] = 1 + r.IntN(2)
						}
					}
					key := func(x int) int { return x % keys }
					watch := &keyWatch{active: map[int]bool{}}
					var fmu sync.Mutex
					b := pipeline.New("keyed", append(m.opts, pipeline.WithResilience(func(o *resilience.Options) {
						o.ItemRetry.MaxRetries = 3
						o.ItemRetry.Backoff = resilience.NoBackoff()
					}))...)
					src := pipelinetest.NewTrackedSource(ints(n)...)
					work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
						watch.enter(key(x))
						defer watch.leave(key(x))
						if x%5 == 0 {
							runtime.Gosched()
						}
						fmu.Lock()
						fail := flaky[x] > 0
						flaky[x]--
						fmu.Unlock()
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
						watch.enter(-1 - key(x))
						defer watch.leave(-1 - key(x))
						mu.Lock()
						got = append(got, x)
						mu.Unlock()
						return nil
					}, pipeline.Keyed(2, key))
					res, err := build(t, b).Run(t.Context())
					require.NoError(t, err)
					assert.Equal(t, repeat(node.Delivered, n), once(t, src, n))
					assertPerKeyOrder(t, got, key, "iteration %d", it)
					assert.Len(t, got, n)
					assert.Zero(t, watch.clash.Load(), "calls of one key overlapped")
					assert.Equal(t, int64(n), nodeOf(t, res, "work").Out)
					assert.Equal(t, int64(n), nodeOf(t, res, "sink").Out)
				}
			})
		}
	}
}

// An item that waits for its retry holds back only its own key: the items
// of every other key, those dealt to the same worker included, are handed
// over meanwhile, and the key's later items follow it in order once it
// succeeds.
func TestKeyedRetryHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for range 10 {
				clock := clockwork.NewFakeClock()
				const n = 400
				// Key 0 is every tenth item; item 0 fails once and waits an
				// hour for its retry.
				key := func(x int) int {
					if x%10 == 0 {
						return 0
					}
					return 1 + x%37
				}
				var failed atomic.Bool
				var calls0 atomic.Int32
				b := pipeline.New("hold", append(m.opts, pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 1
					o.ItemRetry.Backoff = resilience.Constant(time.Hour)
				}))...)
				// Untracked items travel in batches, which the node deals to
				// its workers in chunks: item 0's chunk holds other keys.
				src := pipelinetest.NewSliceSource(ints(n)...)
				work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
					if key(x) == 0 {
						calls0.Add(1)
					}
					if x == 0 && failed.CompareAndSwap(false, true) {
						return 0, errFlaky
					}
					return x, nil
				}, pipeline.Keyed(2, key))
				var mu sync.Mutex
				var got []int
				pipeline.ForEach(b, "sink", work, func(_ context.Context, x int) error {
					mu.Lock()
					got = append(got, x)
					mu.Unlock()
					return nil
				})
				run := pipelinetest.Start(t.Context(), build(t, b))
				others := func() int {
					mu.Lock()
					defer mu.Unlock()
					c := 0
					for _, v := range got {
						if key(v) != 0 {
							c++
						}
					}
					return c
				}
				waitFor(t, func() bool { return others() == n-n/10 }, func() string { return fmt.Sprintf("%d of %d other items", others(), n-n/10) })
				require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
				assert.Equal(t, int32(1), calls0.Load(), "key 0's later items wait behind item 0")
				mu.Lock()
				assert.NotContains(t, got, 0)
				mu.Unlock()
				clock.Advance(time.Hour)
				_, err := run.Wait()
				require.NoError(t, err)
				assert.Len(t, got, n)
				var zero []int
				for _, v := range got {
					if key(v) == 0 {
						zero = append(zero, v)
					}
				}
				assert.True(t, slices.IsSorted(zero), "key 0 in order: %v", zero)
				assert.Len(t, zero, n/10)
			}
		})
	}
}

// A key function that panics fails its item, which goes to the failure
// action; a key that cannot be hashed does the same; NaN keys share one
// order; the run goes on.
func TestKeyedOddKeys(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			dl := deadletter.NewMemory(100)
			b := pipeline.New("odd", append(m.opts, pipeline.WithDeadLetter(dl), pipeline.WithResilience(func(o *resilience.Options) {
				o.OnItemFailure = resilience.DeadLetter
			}))...)
			src := pipelinetest.NewTrackedSource(ints(500)...)
			key := func(x int) any {
				switch {
				case x == 13:
					panic("thirteen")
				case x == 14:
					return []int{x} // not hashable
				case x%3 == 0:
					return math.NaN()
				}
				return x % 5
			}
			var mu sync.Mutex
			var got []int
			pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) error {
				if x%3 == 0 {
					runtime.Gosched()
				}
				mu.Lock()
				got = append(got, x)
				mu.Unlock()
				return nil
			}, pipeline.Keyed(3, key))
			res, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			outcomes := once(t, src, 500)
			for i, o := range outcomes {
				want := node.Delivered
				if i == 13 || i == 14 {
					want = node.DeadLettered
				}
				assert.Equal(t, want, o, "item %d", i)
			}
			assert.Equal(t, int64(2), nodeOf(t, res, "sink").DeadLettered)
			letters := dl.Envelopes()
			require.Len(t, letters, 2)
			slices.SortFunc(letters, func(a, b deadletter.Envelope) int { return a.Item.(int) - b.Item.(int) })
			for _, l := range letters {
				assert.Equal(t, "sink", l.OriginNode)
			}
			assert.Contains(t, letters[0].ErrText, "Keyed: the key function panicked: resilience: panic: thirteen")
			assert.Contains(t, letters[1].ErrText, "Keyed: the key [14] ([]int) cannot be compared")
			var nan, other []int
			for _, v := range got {
				if v%3 == 0 {
					nan = append(nan, v)
				} else {
					other = append(other, v)
				}
			}
			assert.True(t, slices.IsSorted(nan), "NaN keys keep one order")
			assert.Len(t, nan, 167)
			assertPerKeyOrder(t, other, func(x int) int { return x % 5 }, "")
		})
	}
}

// Keyed is refused where it means nothing or cannot work, naming the node
// and what is wrong.
func TestKeyedBuildErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		add  func(b *pipeline.Builder, s pipeline.Stream[int])
		want string
	}{
		{"nil key", func(b *pipeline.Builder, s pipeline.Stream[int]) {
			pipeline.ForEach(b, "n", s, func(context.Context, int) error { return nil }, pipeline.Keyed[int, int](2, nil))
		}, `node "n": Keyed: the key function is nil`},
		{"zero workers", func(b *pipeline.Builder, s pipeline.Stream[int]) {
			pipeline.ForEach(b, "n", s, func(context.Context, int) error { return nil }, pipeline.Keyed(0, mod7))
		}, `node "n": Keyed(0): must be at least 1`},
		{"other input type", func(b *pipeline.Builder, s pipeline.Stream[int]) {
			pipeline.ForEach(b, "n", s, func(context.Context, int) error { return nil }, pipeline.Keyed(2, func(s string) string { return s }))
		}, `node "n": Keyed: the key function takes the node's input, int, not func(string) string`},
		{"with Parallel", func(b *pipeline.Builder, s pipeline.Stream[int]) {
			pipeline.ForEach(b, "n", s, func(context.Context, int) error { return nil }, pipeline.Keyed(2, mod7), pipeline.Parallel(4))
		}, `node "n": Keyed(2) and Parallel: Keyed sets the workers; leave Parallel out`},
		{"on a batch", func(b *pipeline.Builder, s pipeline.Stream[int]) {
			bt := pipeline.Batch(b, "n", s, 4, 0, pipeline.Keyed(2, mod7))
			pipeline.ForEach(b, "sink", bt, func(context.Context, []int) error { return nil })
		}, `node "n": Keyed: only transforms, sinks, filters and flat maps keep per-key order, not a batch`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := pipeline.New("bad")
			c.add(b, pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)))
			_, err := b.Build()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), "Parallel: only", "one error for Keyed")
		})
	}
}

// A run cancelled while keyed workers hold items, some waiting behind
// their keys, ends with every item reported once, none lost: delivered
// before the cancel, or failed.
func TestKeyedCancelReportsEveryItem(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for it := range 20 {
				ctx, cancel := context.WithCancel(t.Context())
				src := pipelinetest.NewTrackedSource(ints(2000)...)
				b := pipeline.New("cancel", m.opts...)
				var seen atomic.Int32
				stopAt := int32(100 + 37*it)
				var mu sync.Mutex
				var got []int
				work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
					if seen.Add(1) == stopAt {
						cancel()
					}
					return x, nil
				}, pipeline.Keyed(3, mod7))
				pipeline.ForEach(b, "sink", work, func(_ context.Context, x int) error {
					mu.Lock()
					got = append(got, x)
					mu.Unlock()
					return nil
				}, pipeline.Keyed(2, mod7))
				_, err := build(t, b).Run(ctx)
				require.ErrorIs(t, err, context.Canceled)
				outcomes := src.Outcomes()
				delivered := map[int]bool{}
				for _, v := range got {
					delivered[v] = true
				}
				for i := range 2000 {
					o := outcomes[i]
					if len(o) == 0 {
						continue // never emitted
					}
					require.Len(t, o, 1, "item %d completes once", i)
					if delivered[i] {
						assert.Equal(t, node.Delivered, o[0], "item %d", i)
					} else {
						assert.Equal(t, node.Failed, o[0], "item %d", i)
					}
				}
				assertPerKeyOrder(t, got, mod7, "iteration %d", it)
				cancel()
			}
		})
	}
}

var errKeyedBoom = errors.New("boom")

// A node restart replays each key's unfinished items in their order, after
// what the node handed over before it failed: downstream never sees a key
// go back.
func TestKeyedRestartKeepsEachKeysOrder(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for it := range 10 {
				r := rand.New(rand.NewPCG(uint64(it), 5))
				f := &failOnce{fail: map[int]bool{}, calls: map[int]int{}}
				for i := range 600 {
					if r.IntN(40) == 0 {
						f.fail[i] = true
					}
				}
				b := pipeline.New("restart", append(m.opts, pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 0
					o.NodeRestart.MaxRestarts = 100
					o.NodeRestart.MaxReplayWindow = 8 + r.IntN(64)
					o.NodeRestart.Backoff = resilience.NoBackoff()
				}))...)
				src := pipelinetest.NewTrackedSource(ints(600)...)
				key := func(x int) int { return x % 11 }
				work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
					if x%4 == 0 {
						runtime.Gosched()
					}
					if f.hit(x) {
						return 0, errKeyedBoom
					}
					return x, nil
				}, pipeline.Keyed(3, key))
				var mu sync.Mutex
				var got []int
				pipeline.ForEach(b, "sink", work, func(_ context.Context, x int) error {
					mu.Lock()
					got = append(got, x)
					mu.Unlock()
					return nil
				})
				_, err := build(t, b).Run(t.Context())
				require.NoError(t, err)
				assert.Equal(t, repeat(node.Delivered, 600), once(t, src, 600))
				assert.Len(t, got, 600)
				assertPerKeyOrder(t, got, key, "iteration %d", it)
			}
		})
	}
}

// A worker keeps a key until its writer handed the key's last item over:
// a later item of the key, taken by another worker meanwhile, must not
// overtake it downstream. Item 0 (key 0) lies gathered in its worker's
// writer while that worker is held at item 1; item 32, of key 0 too,
// arrives and must wait for it.
func TestKeyedLaterItemDoesNotOvertakeAGatheredOne(t *testing.T) {
	t.Parallel()
	for range 20 {
		var pl atomic.Pointer[pipeline.Pipeline]
		started := make(chan struct{})
		var called32 atomic.Bool
		b := pipeline.New("overtake")
		src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
			for i := range 32 {
				if err := out.Emit(ctx, i); err != nil {
					return err
				}
			}
			<-started
			return out.Emit(ctx, 32)
		}))
		key := func(x int) int {
			if x == 0 || x == 32 {
				return 0
			}
			return x
		}
		work := pipeline.Map(b, "work", src, func(_ context.Context, x int) (int, error) {
			switch x {
			case 1:
				close(started)
				// Hold this worker, item 0 still gathered, until item 32 was
				// read and had its chance to be taken by the other worker.
				waitFor(t, func() bool {
					s, _ := pl.Load().Stats().Node("work")
					return s.In == 33
				})
				for i := 0; i < 2000 && !called32.Load(); i++ {
					runtime.Gosched()
				}
			case 32:
				called32.Store(true)
			}
			return x, nil
		}, pipeline.Keyed(2, key))
		var got []int
		pipeline.ForEach(b, "sink", work, func(_ context.Context, x int) error {
			got = append(got, x)
			return nil
		})
		p := build(t, b)
		pl.Store(p)
		_, err := p.Run(t.Context())
		require.NoError(t, err)
		require.Len(t, got, 33)
		assert.Less(t, slices.Index(got, 0), slices.Index(got, 32), "item 32 overtook item 0: %v", got)
	}
}

// With more keys than the node keeps lanes for, idle lanes are swept while
// busy ones keep their order: here every seventh item shares one key and
// the others each have their own.
func TestKeyedManyKeys(t *testing.T) {
	t.Parallel()
	const n = 30_000
	key := func(x int) int {
		if x%7 == 0 {
			return -1
		}
		return x
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := pipeline.New("many", m.opts...)
			src := pipelinetest.NewTrackedSource(ints(n)...)
			work := pipeline.Map(b, "work", pipeline.Source[int](b, "src", src), func(_ context.Context, x int) (int, error) {
				if x%7 == 0 {
					runtime.Gosched()
				}
				return x, nil
			}, pipeline.Keyed(3, key))
			var hot []int
			count := 0
			pipeline.ForEach(b, "sink", work, func(_ context.Context, x int) error {
				count++
				if x%7 == 0 {
					hot = append(hot, x)
				}
				return nil
			})
			_, err := build(t, b).Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, repeat(node.Delivered, n), once(t, src, n))
			assert.Equal(t, n, count)
			assert.True(t, slices.IsSorted(hot), "the shared key keeps its order")
			assert.Len(t, hot, (n+6)/7)
		})
	}
}
