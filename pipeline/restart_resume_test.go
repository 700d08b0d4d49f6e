package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// script fails item x on its first fails[x] calls, by error or panic.
type script struct {
	mu    sync.Mutex
	fails map[int]int
	panic map[int]bool
	calls map[int]int
}

func (s *script) hit(x int) error {
	s.mu.Lock()
	s.calls[x]++
	c := s.calls[x]
	f, p := s.fails[x], s.panic[x]
	s.mu.Unlock()
	if c <= f {
		if p {
			panic(fmt.Sprintf("boom %d", x))
		}
		return errFlaky
	}
	return nil
}

// reopener is a transform with Open/Close whose Open fails on chosen opens.
type reopener struct {
	s        *script
	mu       sync.Mutex
	opens    int
	failOpen map[int]bool
}

func (r *reopener) Open(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opens++
	if r.failOpen[r.opens] {
		return errors.New("open failed")
	}
	return nil
}
func (r *reopener) Close(context.Context) error { return nil }
func (r *reopener) Process(_ context.Context, x int) (int, error) {
	if err := r.s.hit(x); err != nil {
		return 0, err
	}
	return x, nil
}

// A node with one worker under node restart, every kind, with and without a
// breaker (closed, or pausing), errors and panics, retries that run out in
// the middle of a run, Opens that fail on reopen: every item is handed
// downstream exactly once, in order, its done says Delivered once, and a
// non-failing item is called exactly once.
func TestSingleWorkerRestartsResumeWhereTheyFailed(t *testing.T) {
	t.Parallel()
	const items = 300
	for _, kind := range []string{"transform", "reopen", "sink", "flatmap", "filter"} {
		for _, br := range []string{"none", "closed", "pause"} {
			for _, m := range modes {
				t.Run(fmt.Sprintf("%s/%s/%s", kind, br, m.name), func(t *testing.T) {
					t.Parallel()
					for it := range 6 {
						rng := rand.New(rand.NewPCG(uint64(it), 77))
						s := &script{fails: map[int]int{}, panic: map[int]bool{}, calls: map[int]int{}}
						retries := rng.IntN(3)
						for i := range items {
							if rng.IntN(12) == 0 {
								// enough failures to exhaust L1 at least once
								s.fails[i] = retries + 1 + rng.IntN(2*(retries+1))
								s.panic[i] = kind != "filter" && rng.IntN(3) == 0
							}
						}
						clock := clockwork.NewFakeClock()
						b := pipeline.New("r2", append([]pipeline.Option{pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
							o.ItemRetry.MaxRetries = retries
							o.ItemRetry.Backoff = resilience.NoBackoff()
							if rng.IntN(2) == 0 {
								o.ItemRetry.Backoff = resilience.Constant(time.Millisecond)
							}
							o.NodeRestart.MaxRestarts = 100
							o.NodeRestart.Backoff = resilience.NoBackoff()
							o.NodeRestart.ResetAfterItems = 1
							o.NodeRetry.MaxRetries = 0
							switch br {
							case "closed":
								o.CircuitBreaker.Enabled = true
								o.CircuitBreaker.ConsecutiveFailures = 1000
							case "pause":
								o.CircuitBreaker.Enabled = true
								o.CircuitBreaker.ConsecutiveFailures = 2
								o.CircuitBreaker.OpenDuration = time.Second
								o.CircuitBreaker.WhenOpen = resilience.OpenPause
								o.CircuitBreaker.MaxPause = 20 * time.Second
							}
						})}, m.opts...)...)
						src := pipelinetest.NewTrackedSource(ints(items)...)
						in := pipeline.Source[int](b, "src", src)
						var mu sync.Mutex
						var got []int
						collect := node.SinkFunc[int](func(_ context.Context, x int) error {
							mu.Lock()
							got = append(got, x)
							mu.Unlock()
							return nil
						})
						var filterCalls sync.Map
						switch kind {
						case "transform":
							out := pipeline.Transform(b, "work", in, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
								if err := s.hit(x); err != nil {
									return 0, err
								}
								return x, nil
							}))
							pipeline.Sink(b, "sink", out, collect)
						case "reopen":
							fo := map[int]bool{}
							for k := 2; k < 400; k++ {
								if rng.IntN(4) == 0 {
									fo[k] = true
								}
							}
							out := pipeline.Transform[int, int](b, "work", in, &reopener{s: s, failOpen: fo})
							pipeline.Sink(b, "sink", out, collect)
						case "sink":
							pipeline.Sink(b, "work", in, node.SinkFunc[int](func(ctx context.Context, x int) error {
								if err := s.hit(x); err != nil {
									return err
								}
								return collect(ctx, x)
							}))
						case "flatmap":
							out := pipeline.FlatMap(b, "work", in, func(_ context.Context, x int) ([]int, error) {
								if err := s.hit(x); err != nil {
									return nil, err
								}
								return []int{x}, nil
							})
							pipeline.Sink(b, "sink", out, collect)
						case "filter":
							// Filter cannot fail but by a panic: panic on the
							// chosen item's first calls.
							out := pipeline.Filter(b, "work", in, func(x int) bool {
								v, _ := filterCalls.LoadOrStore(x, new(int))
								p := v.(*int)
								*p++
								if *p <= s.fails[x] {
									panic("filter boom")
								}
								return true
							})
							pipeline.Sink(b, "sink", out, collect)
						}
						r := pipelinetest.Start(t.Context(), build(t, b))
						res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, r, time.Second)
						require.NoError(t, err, "iteration %d", it)
						mu.Lock()
						require.Equal(t, ints(items), got, "iteration %d: in order, once", it)
						mu.Unlock()
						outs := src.Outcomes()
						for i := range items {
							require.Equal(t, []node.Outcome{node.Delivered}, outs[i], "iteration %d item %d", it, i)
						}
						if kind != "filter" {
							s.mu.Lock()
							for i := range items {
								want := 1 + s.fails[i]
								require.Equal(t, want, s.calls[i], "iteration %d item %d: calls", it, i)
							}
							s.mu.Unlock()
						}
						_ = res
						runtime.Gosched()
					}
				})
			}
		}
	}
	_ = slices.Clone[[]int]
}
