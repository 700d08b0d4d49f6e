package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// cancelSoon is a call context cancelled by another goroutine after a few
// scheduler yields: its end races with the hand-over.
func cancelSoon(parent context.Context, yields int) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range yields {
			runtime.Gosched()
		}
		cancel()
	}()
	return ctx, func() { cancel(); <-done }
}

type fanLedger struct {
	mu       sync.Mutex
	ok       map[int]bool
	outcomes map[int][]node.Outcome
	written  map[string]map[int]int
}

func newFanLedger() *fanLedger {
	return &fanLedger{ok: map[int]bool{}, outcomes: map[int][]node.Outcome{}, written: map[string]map[int]int{}}
}

func (l *fanLedger) sink(name string, slow bool) node.Sink[int] {
	l.mu.Lock()
	l.written[name] = map[int]int{}
	l.mu.Unlock()
	return node.SinkFunc[int](func(_ context.Context, x int) error {
		if slow {
			runtime.Gosched()
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.written[name][x]++
		return nil
	})
}

// Broadcast with tracked items whose Emit contexts end at random moments:
// every item goes to every branch or none, done runs once, Run succeeds.
func TestBroadcastWithRandomEmitContexts(t *testing.T) {
	t.Parallel()
	const items = 300
	iters := 10
	topologies := []string{"two-sinks", "three-sinks", "batch-unbatch+filter"}
	for _, topo := range topologies {
		for _, m := range edgeModes {
			for _, tracked := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/tracked=%t", topo, m.name, tracked), func(t *testing.T) {
					t.Parallel()
					for it := range iters {
						l := newFanLedger()
						rng := rand.New(rand.NewPCG(uint64(it), 7))
						b := pipeline.New("fan", append([]pipeline.Option{pipeline.WithBuffer(4)}, m.opts...)...)
						_ = 0
						src := pipeline.Source(b, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
							for i := range items {
								call, stop := ctx, func() {}
								if rng.IntN(3) == 0 {
									call, stop = cancelSoon(ctx, rng.IntN(20))
								}
								var err error
								if tracked {
									err = out.EmitTracked(call, i, func(o node.Outcome) {
										l.mu.Lock()
										l.outcomes[i] = append(l.outcomes[i], o)
										l.mu.Unlock()
									})
								} else {
									err = out.Emit(call, i)
								}
								stop()
								if err == nil {
									l.mu.Lock()
									l.ok[i] = true
									l.mu.Unlock()
								} else if ctx.Err() != nil {
									return err
								}
							}
							return nil
						}))
						var sinks []string
						switch topo {
						case "two-sinks":
							pipeline.Sink(b, "a", src, l.sink("a", true))
							pipeline.Sink(b, "b", src, l.sink("b", false))
							sinks = []string{"a", "b"}
						case "three-sinks":
							pipeline.Sink(b, "a", src, l.sink("a", true))
							pipeline.Sink(b, "b", src, l.sink("b", false))
							pipeline.Sink(b, "c", src, l.sink("c", true), pipeline.Buffer(1))
							sinks = []string{"a", "b", "c"}
						case "batch-unbatch+filter":
							bt := pipeline.Batch(b, "batch", src, 3, 0)
							ub := pipeline.Unbatch(b, "unbatch", bt)
							pipeline.Sink(b, "a", ub, l.sink("a", true))
							f := pipeline.Filter(b, "even", src, func(x int) bool { return x%2 == 0 })
							pipeline.Sink(b, "b", f, l.sink("b", false))
							sinks = []string{"a", "b"}
						}
						res, err := build(t, b).Run(t.Context())
						require.NoError(t, err, "iteration %d", it)
						l.mu.Lock()
						var bad []string
						nok := 0
						for i := range items {
							if l.ok[i] {
								nok++
							}
							for _, s := range sinks {
								want := 0
								if l.ok[i] && !(s == "b" && topo == "batch-unbatch+filter" && i%2 == 1) {
									want = 1
								}
								if got := l.written[s][i]; got != want {
									bad = append(bad, fmt.Sprintf("item %d sink %s: written %d want %d (emit ok=%t)", i, s, got, want, l.ok[i]))
								}
							}
							if tracked {
								want := node.Failed
								if l.ok[i] {
									want = node.Delivered
								}
								if !slices.Equal(l.outcomes[i], []node.Outcome{want}) {
									bad = append(bad, fmt.Sprintf("item %d outcomes %v want [%v]", i, l.outcomes[i], want))
								}
							}
						}
						l.mu.Unlock()
						require.Empty(t, bad, "iteration %d", it)
						assert.Equal(t, int64(nok), nodeOf(t, res, "src").Out, "iteration %d: src Out", it)
						for _, s := range sinks {
							st := nodeOf(t, res, s)
							assert.Equal(t, st.In, st.Out, "iteration %d sink %s In/Out", it, s)
						}
					}
				})
			}
		}
	}
}

var edgeModes = append(append([]struct {
	name string
	opts []pipeline.Option
}{}, modes...), struct {
	name string
	opts []pipeline.Option
}{"unbuffered", []pipeline.Option{pipeline.WithHandOverBatch(1), pipeline.WithBuffer(0)}}, struct {
	name string
	opts []pipeline.Option
}{"batch2-buf0", []pipeline.Option{pipeline.WithHandOverBatch(2), pipeline.WithBuffer(0)}})
