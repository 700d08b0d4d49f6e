package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// blockingSink writes items until it reaches stop, then blocks until its
// context ends, or until release is closed, when it writes on; written is
// what it wrote, blocked is closed when it blocks.
type blockingSink struct {
	stop    int
	mu      sync.Mutex
	written []int
	blocked chan struct{}
	release chan struct{}
}

func newBlockingSink(stop int) *blockingSink {
	return &blockingSink{stop: stop, blocked: make(chan struct{}), release: make(chan struct{})}
}

func (s *blockingSink) write(ctx context.Context, v int) error {
	if v == s.stop {
		close(s.blocked)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.release:
		}
	}
	s.mu.Lock()
	s.written = append(s.written, v)
	s.mu.Unlock()
	return nil
}

func (s *blockingSink) wrote() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written)
}

// How a run stops while the sink after an Unbatch blocks on an item: a
// drain alone lets the sink write on, and every item is delivered.
var unbatchStops = []string{"cancel", "drain-then-cancel", "node-fails", "drain"}

// Each item that went through Batch and Unbatch gets its own fate when the
// run stops: 8 tracked items, batched, handed on item by item, a sink that
// writes items 0 to 3 and blocks on 4; the run stops (cancelled, drained
// then cancelled, failed by another node). Items 0 to 3 were written:
// Delivered, once. Items 4 to 7 were not: Failed, once. A drain alone lets
// the sink write on: all Delivered. Every batch size: 1, fewer items than
// a batch, exactly a batch, a batch and a part. With a Map over the
// batches between, which may have reordered them, the items of a batch
// share its fate: each ends once, and none that was not written is
// Delivered.
func TestUnbatchedItemsGetTheirOwnFateWhenTheRunStops(t *testing.T) {
	t.Parallel()
	const n, stop = 8, 4
	for _, m := range modes {
		for _, size := range []int{1, 3, n, 16} {
			for _, between := range []bool{false, true} {
				for _, how := range unbatchStops {
					t.Run(fmt.Sprintf("%s/size=%d/map=%v/%s", m.name, size, between, how), func(t *testing.T) {
						t.Parallel()
						src := pipelinetest.NewTrackedSource(ints(n)...)
						sink := newBlockingSink(stop)
						b := pipeline.New("unbatch-fate", stopOptions(m.opts, how)...)
						batches := pipeline.Batch(b, "batch", pipeline.Source(b, "src", src), size, 0)
						if between {
							batches = pipeline.Map(b, "same", batches, func(_ context.Context, v []int) ([]int, error) { return v, nil })
						}
						pipeline.ForEach(b, "sink", pipeline.Unbatch(b, "unbatch", batches), sink.write)
						stopRun := runStopper(t, b, how, sink)
						p := build(t, b)
						ctx, cancel := context.WithCancel(t.Context())
						defer cancel()
						run := pipelinetest.Start(ctx, p)
						<-sink.blocked
						stopRun(p, cancel)
						_, err := run.Wait()
						assertStopped(t, how, err)
						if between {
							assertSafeFates(t, src.Outcomes(), sink.wrote(), n)
						} else {
							assertOwnFates(t, src.Outcomes(), sink.wrote(), n)
						}
					})
				}
			}
		}
	}
}

// The same through Route: items routed to two branches, each batched and
// unbatched, under stops at random moments of the sinks' progress.
func TestRoutedUnbatchedItemsGetTheirOwnFateWhenTheRunStops(t *testing.T) {
	t.Parallel()
	const n = 40
	for _, m := range modes {
		for _, how := range unbatchStops {
			t.Run(m.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(uint64(len(m.name)), uint64(len(how))))
				for range 10 {
					stop := r.IntN(n)
					src := pipelinetest.NewTrackedSource(ints(n)...)
					sink := newBlockingSink(stop)
					b := pipeline.New("route-unbatch-fate", stopOptions(m.opts, how)...)
					br := pipeline.Route(b, "route", pipeline.Source(b, "src", src), 2, func(v int) int { return v % 2 })
					var mu sync.Mutex
					var other []int
					for i, s := range br {
						items := pipeline.Unbatch(b, fmt.Sprintf("unbatch%d", i), pipeline.Batch(b, fmt.Sprintf("batch%d", i), s, 1+r.IntN(8), 0))
						if i == stop%2 {
							pipeline.ForEach(b, "sink", items, sink.write)
							continue
						}
						pipeline.ForEach(b, "other", items, func(_ context.Context, v int) error {
							mu.Lock()
							other = append(other, v)
							mu.Unlock()
							return nil
						})
					}
					stopRun := runStopper(t, b, how, sink)
					p := build(t, b)
					ctx, cancel := context.WithCancel(t.Context())
					run := pipelinetest.Start(ctx, p)
					<-sink.blocked
					stopRun(p, cancel)
					_, err := run.Wait()
					cancel()
					assertStopped(t, how, err)
					mu.Lock()
					written := append(sink.wrote(), other...)
					mu.Unlock()
					assertOwnFates(t, src.Outcomes(), written, n)
				}
			})
		}
	}
}

// stopOptions returns opts, with a short grace period for "node-fails":
// the sink blocks on an item until its context ends, which a failure of
// the run gives only after the grace (DefaultFailGrace, on the real clock
// here), and the test is about fates, not about the wait.
func stopOptions(opts []pipeline.Option, how string) []pipeline.Option {
	if how != "node-fails" {
		return opts
	}
	return append(slices.Clone(opts), pipeline.WithDrainTimeout(10*time.Millisecond))
}

// runStopper adds what a stop needs to b (a source that fails on demand,
// for "node-fails") and returns the function that stops the run.
func runStopper(t *testing.T, b *pipeline.Builder, how string, sink *blockingSink) func(p *pipeline.Pipeline, cancel context.CancelFunc) {
	t.Helper()
	switch how {
	case "drain":
		return func(p *pipeline.Pipeline, _ context.CancelFunc) {
			p.Drain()
			close(sink.release)
		}
	case "cancel":
		return func(_ *pipeline.Pipeline, cancel context.CancelFunc) { cancel() }
	case "drain-then-cancel":
		return func(p *pipeline.Pipeline, cancel context.CancelFunc) {
			p.Drain()
			cancel()
		}
	case "node-fails":
		fail := make(chan struct{})
		pipeline.ForEach(b, "bystander", pipeline.Source(b, "failing", node.SourceFunc[int](func(ctx context.Context, _ node.Emitter[int]) error {
			select {
			case <-fail:
				return errors.New("the failing source failed")
			case <-ctx.Done():
				return ctx.Err()
			}
		})), func(context.Context, int) error { return nil })
		return func(*pipeline.Pipeline, context.CancelFunc) { close(fail) }
	}
	require.FailNow(t, "unknown stop "+how)
	return nil
}

// assertStopped checks what Run returned after the stop how: nil after a
// drain alone, an error after the others.
func assertStopped(t *testing.T, how string, err error) {
	t.Helper()
	if how == "drain" {
		require.NoError(t, err, "a drained run ends cleanly")
		return
	}
	require.Error(t, err, "the run was stopped")
}

// assertOwnFates checks that each of the n items the source emitted (the
// first ones: a stopped run ends the source) has exactly one outcome:
// Delivered when it was written, Failed when not.
func assertOwnFates(t *testing.T, outcomes map[int][]node.Outcome, written []int, n int) {
	t.Helper()
	emitted := 0
	for emitted < n && outcomes[emitted] != nil {
		emitted++
	}
	require.Positive(t, emitted, "the source emitted")
	for i := range n {
		if i >= emitted {
			assert.Nil(t, outcomes[i], "item %d after the first not emitted, %d", i, emitted)
			assert.NotContains(t, written, i, "item %d was not emitted", i)
			continue
		}
		want := node.Failed
		if slices.Contains(written, i) {
			want = node.Delivered
		}
		assert.Equal(t, []node.Outcome{want}, outcomes[i], "item %d (written: %v)", i, written)
	}
}

// assertSafeFates checks that each of the n items the source emitted ended
// once, and that none that was not written was reported Delivered: the
// items of a batch that shared its tracker may end Failed although
// written (delivered again: at least once), never the other way.
func assertSafeFates(t *testing.T, outcomes map[int][]node.Outcome, written []int, n int) {
	t.Helper()
	emitted := 0
	for emitted < n && outcomes[emitted] != nil {
		emitted++
	}
	require.Positive(t, emitted, "the source emitted")
	for i := range emitted {
		require.Len(t, outcomes[i], 1, "item %d ends once", i)
		if !slices.Contains(written, i) {
			assert.NotEqual(t, node.Delivered, outcomes[i][0], "item %d was not written (written: %v)", i, written)
		}
	}
}
