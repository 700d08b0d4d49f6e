package pipeline_test

// Route and Drain at their edges: a run that stops while items are on
// their branches, hand-off through a Route, a drain during a source's
// backoff, a drain racing the run's end.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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

// waitFor spins (yielding, no sleep) until cond holds or 10 s of real time
// passed.
func waitFor(t *testing.T, cond func() bool, why ...func() string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			msg := "condition never held"
			for _, w := range why {
				msg += ": " + w()
			}
			t.Fatal(msg)
		}
		runtime.Gosched()
	}
}

// An item routed to branch 0 and written there is reported Delivered, even
// when the run stops before branch 1, which is not its branch, took its
// copy.
func TestRouteDeliveredItemReportedFailedWhenRunStops(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			src := pipelinetest.NewTrackedSource(ints(2000)...)
			b := pipeline.New("route", m.opts...)
			br := pipeline.Route(b, "r", pipeline.Source[int](b, "src", src), 2, func(v int) int {
				return v % 2
			})
			var mu sync.Mutex
			written := map[int]bool{}
			pipeline.ForEach(b, "sink0", br[0], func(_ context.Context, v int) error {
				mu.Lock()
				written[v] = true
				mu.Unlock()
				return nil
			})
			// Branch 1's consumer is stuck on its first item.
			pipeline.ForEach(b, "sink1", br[1], func(ctx context.Context, v int) error {
				<-ctx.Done()
				return ctx.Err()
			})
			p := build(t, b)
			ctx, cancel := context.WithCancel(t.Context())
			run := pipelinetest.Start(ctx, p)
			// Wait until the router is stuck behind branch 1 and sink0
			// wrote everything it will get.
			last := int64(-1)
			stable := 0
			waitFor(t, func() bool {
				mu.Lock()
				n := int64(len(written))
				mu.Unlock()
				if n == last && n > 0 {
					stable++
				} else {
					stable, last = 0, n
				}
				return stable > 20000
			})
			cancel()
			_, err := run.Wait()
			require.ErrorIs(t, err, context.Canceled)
			mu.Lock()
			defer mu.Unlock()
			wrong := 0
			for i, o := range src.Outcomes() {
				if written[i] && o[0] != node.Delivered {
					wrong++
				}
			}
			assert.Zero(t, wrong, "items written on their own branch (%d written) but reported Failed", len(written))
		})
	}
}

// A Route does not split an item (only its branch carries it on), so a
// node downstream of it can still hand a long wait to the broker.
func TestRouteDisablesHandOff(t *testing.T) {
	t.Parallel()
	for _, routed := range []bool{false, true} {
		t.Run(fmt.Sprint("routed=", routed), func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			b := pipeline.New("handoff", pipeline.WithClock(clock),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.ItemRetry.MaxRetries = 3
					o.ItemRetry.Backoff = resilience.Exponential(time.Second).WithMaxDelay(3 * time.Hour)
				}))
			brk := newSimBroker(time.Minute, 1)
			f := &scripted{script: map[int][]error{1: {wait(time.Hour), nil}}}
			s := pipeline.Source[delivery](b, "src", brk)
			if routed {
				yes, no := pipeline.Split(b, "split", s, func(delivery) bool { return true })
				pipeline.Sink(b, "other", no, &pipelinetest.Collector[delivery]{})
				s = yes
			}
			out := pipeline.Transform[delivery, delivery](b, "call", s, f)
			pipeline.Sink(b, "sink", out, &pipelinetest.Collector[delivery]{})
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Minute)
			require.NoError(t, err)
			assert.Len(t, brk.handOffs, 1, "the hour's wait is handed to the broker")
			assert.Equal(t, []node.Outcome{node.HandedOff, node.Delivered}, brk.outcomes[1])
		})
	}
}

// reopening is a source that emits one tracked item, then fails with a
// transient error (a lost connection), so that node restart waits its
// backoff and opens it again. Open fails once down is set.
type reopening struct {
	opens, runs atomic.Int32
	down        atomic.Bool
	failed      chan struct{}
	once        sync.Once
}

func (s *reopening) Open(context.Context) error {
	s.opens.Add(1)
	if s.down.Load() {
		return resilience.MarkTransient(errors.New("broker down"))
	}
	return nil
}

func (s *reopening) Run(ctx context.Context, out node.Emitter[int]) error {
	if s.runs.Add(1) > 1 {
		// Restarted after the drain: a well-behaved source sees its
		// context and returns.
		<-ctx.Done()
		return context.Cause(ctx)
	}
	if err := out.EmitTracked(ctx, 1, func(node.Outcome) {}); err != nil {
		return err
	}
	s.once.Do(func() { close(s.failed) })
	return errors.New("connection lost")
}

// A drain while the source waits in node restart's backoff ends the wait:
// the source is not opened again, and the run ends cleanly, with the broker
// up or down.
func TestDrainWaitsOutSourceRestartBackoff(t *testing.T) {
	t.Parallel()
	for _, down := range []bool{false, true} {
		t.Run(fmt.Sprint("down=", down), func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			src := &reopening{failed: make(chan struct{})}
			b := pipeline.New("drain", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1),
				pipeline.WithResilience(func(o *resilience.Options) {
					o.NodeRestart.MaxRestarts = 2
					o.NodeRestart.Backoff = resilience.Constant(time.Hour)
				}))
			pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(context.Context, int) error { return nil })
			p := build(t, b)
			run := pipelinetest.Start(t.Context(), p)
			<-src.failed
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the source waits its restart backoff")
			src.down.Store(down)
			require.True(t, p.Drain())
			select {
			case <-run.Done():
			case <-time.After(3 * time.Second):
				t.Errorf("the drained run did not end while the source waited its restart backoff (opens so far: %d)", src.opens.Load())
			}
			_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Hour)
			assert.NoError(t, err, "a drain ends the run cleanly")
			assert.Equal(t, int32(1), src.opens.Load(), "the drained source is not opened again")
		})
	}
}

// A source still in node retry (it failed to open) when the drain comes:
// no Open after the drain, and the run ends cleanly.
func TestDrainDuringNodeRetryFailsTheRun(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	src := &reopening{failed: make(chan struct{})}
	src.down.Store(true)
	b := pipeline.New("drain", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.NodeRetry.MaxRetries = 3
			o.NodeRetry.Backoff = resilience.Constant(time.Minute)
		}))
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(context.Context, int) error { return nil })
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the source waits its node-retry backoff")
	require.True(t, p.Drain())
	_, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, run, time.Minute)
	assert.NoError(t, err, "a drain ends the run cleanly; the source had emitted nothing")
	assert.Equal(t, int32(1), src.opens.Load(), "no Open after the drain")
}

// Drain racing with the end of a run arms no WithDrainTimeout timer that
// outlives the run, and a source that stops because of it ends cleanly.
func TestDrainTimerLeaksWhenDrainRacesRunEnd(t *testing.T) {
	t.Parallel()
	leaks := 0
	for i := range 1500 {
		clock := clockwork.NewFakeClock()
		b := pipeline.New("drain", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDrainTimeout(time.Hour))
		pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", pipelinetest.NewSliceSource(1)), func(context.Context, int) error { return nil })
		p := build(t, b)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					p.Drain()
					runtime.Gosched()
				}
			}
		})
		_, err := p.Run(t.Context())
		close(stop)
		wg.Wait()
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		if clock.BlockUntilContext(ctx, 1) == nil {
			leaks++
		}
		cancel()
		if leaks > 0 && i > 100 {
			break
		}
	}
	assert.Zero(t, leaks, "drain timers left armed after Run returned")
}

// A router's pick that panics on an item's first call, under node restart
// with Parallel (ordered and unordered, so the replay window is used):
// every item still reaches exactly one branch once, and its done reports
// Delivered.
func TestRouteUnderRouterRestartParallel(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for _, unordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unordered=%v", m.name, unordered), func(t *testing.T) {
				t.Parallel()
				for range 5 {
					clock := clockwork.NewFakeClock()
					opts := append([]pipeline.Option{pipeline.WithClock(clock), pipeline.WithResilience(func(o *resilience.Options) {
						o.NodeRestart.MaxRestarts = 100
						o.NodeRestart.Backoff = resilience.Constant(time.Millisecond)
						o.NodeRestart.MaxReplayWindow = 64
					})}, m.opts...)
					b := pipeline.New("route", opts...)
					src := pipelinetest.NewTrackedSource(ints(600)...)
					var mu sync.Mutex
					panicked := map[int]bool{}
					ropts := []pipeline.NodeOption{pipeline.Parallel(4)}
					if unordered {
						ropts = append(ropts, pipeline.Unordered())
					}
					br := pipeline.Route(b, "r", pipeline.Source[int](b, "src", src), 3, func(v int) int {
						mu.Lock()
						first := !panicked[v]
						panicked[v] = true
						mu.Unlock()
						if first && v%37 == 0 {
							panic(fmt.Sprint("pick ", v))
						}
						return v % 3
					}, ropts...)
					got := make([]map[int]int, 3)
					for i := range got {
						got[i] = map[int]int{}
						pipeline.ForEach(b, fmt.Sprint("s", i), br[i], func(_ context.Context, v int) error {
							mu.Lock()
							got[i][v]++
							mu.Unlock()
							return nil
						})
					}
					res, err := pipelinetest.AdvanceUntilDone(t.Context(), clock, pipelinetest.Start(t.Context(), build(t, b)), time.Millisecond)
					require.NoError(t, err)
					for v := range 600 {
						for i := range 3 {
							want := 0
							if v%3 == i {
								want = 1
							}
							assert.Equal(t, want, got[i][v], "item %d on branch %d", v, i)
						}
					}
					for i, o := range once(t, src, 600) {
						assert.Equal(t, node.Delivered, o, "item %d", i)
					}
					assert.Positive(t, nodeOf(t, res, "r").NodeRestarts)
					for i := range 3 {
						st := nodeOf(t, res, fmt.Sprintf("r[%d]", i))
						assert.Equal(t, int64(200), st.In)
						assert.Equal(t, int64(200), st.Out)
						assert.Zero(t, st.Filtered)
					}
				}
			})
		}
	}
}

// Batch before and after a Route: a batch routed as one item, and items
// batched on their branch, each report their branch's outcome.
func TestBatchAroundRoute(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		src := pipelinetest.NewTrackedSource(ints(100)...)
		b := pipeline.New("route", m.opts...)
		batches := pipeline.Batch(b, "batch", pipeline.Source[int](b, "src", src), 7, time.Hour)
		yes, no := pipeline.Split(b, "split", batches, func(bt []int) bool { return bt[0]%2 == 0 })
		pipeline.ForEach(b, "yes", yes, func(context.Context, []int) error { return nil })
		un := pipeline.Unbatch(b, "unbatch", no)
		a, c := pipeline.Split(b, "split2", un, func(v int) bool { return v%3 == 0 })
		pipeline.ForEach(b, "a", pipeline.Batch(b, "rebatch", a, 5, time.Hour), func(context.Context, []int) error { return nil })
		pipeline.ForEach(b, "c", pipeline.Filter(b, "drop", c, func(int) bool { return false }), func(context.Context, int) error { return nil })
		_, err := build(t, b).Run(t.Context())
		require.NoError(t, err)
		for v, o := range once(t, src, 100) {
			batchStart := v / 7 * 7
			want := node.Delivered
			if batchStart%2 != 0 && v%3 != 0 {
				want = node.Filtered
			}
			assert.Equal(t, want, o, "%s item %d", m.name, v)
		}
	}
}

// Drain with two sources merged: both stop, every emitted item is written
// once, Run returns nil.
func TestDrainMerge(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		for range 10 {
			s1 := &endless{watch: true, outcomes: map[int64][]node.Outcome{}}
			s2 := &endless{watch: false, outcomes: map[int64][]node.Outcome{}}
			b := pipeline.New("drain", m.opts...)
			var p *pipeline.Pipeline
			var written atomic.Int64
			merged := pipeline.Merge(b, "merge", pipeline.Source[int64](b, "s1", s1), pipeline.Source[int64](b, "s2", s2))
			pipeline.ForEach(b, "sink", merged, func(context.Context, int64) error {
				if written.Add(1) == 300 {
					p.Drain()
				}
				return nil
			})
			p = build(t, b)
			_, err := p.Run(t.Context())
			require.NoError(t, err)
			assert.Equal(t, s1.emitted.Load()+s2.emitted.Load(), written.Load())
			for _, s := range []*endless{s1, s2} {
				for i := range s.emitted.Load() {
					assert.Equal(t, []node.Outcome{node.Delivered}, s.outcomes[i])
				}
			}
		}
	}
}

// A source that ignores its context, blocked in Emit on backpressure when
// the drain comes: the blocked Emit completes once the sink moves, a few
// more are accepted (up to stopEvery), then Emit refuses and the run ends
// cleanly. Drain before Run and after it reports false.
func TestDrainBlockedEmit(t *testing.T) {
	t.Parallel()
	b := pipeline.New("drain", pipeline.WithHandOverBatch(1), pipeline.WithBuffer(0))
	var emitted, written atomic.Int64
	src := node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := 0; ; i++ {
			if err := out.Emit(context.Background(), i); err != nil {
				return err
			}
			emitted.Add(1)
		}
	})
	release := make(chan struct{})
	pipeline.ForEach(b, "sink", pipeline.Source[int](b, "src", src), func(context.Context, int) error {
		if written.Add(1) == 1 {
			<-release
		}
		return nil
	})
	p := build(t, b)
	assert.False(t, p.Drain(), "no run yet")
	run := pipelinetest.Start(t.Context(), p)
	waitFor(t, func() bool { return emitted.Load() >= 1 })
	waitFor(t, func() bool { return p.Drain() })
	close(release)
	_, err := run.Wait()
	require.NoError(t, err)
	assert.Equal(t, emitted.Load(), written.Load())
	assert.LessOrEqual(t, emitted.Load(), int64(10))
	assert.False(t, p.Drain(), "run over")
}

// The same as TestRouteDeliveredItemReportedFailedWhenRunStops,
// stopped by a branch whose consumer fails the run: items written on the
// other branch are reported Failed.
func TestRouteBranchFailureFailsItemsDeliveredElsewhere(t *testing.T) {
	t.Parallel()
	src := pipelinetest.NewTrackedSource(ints(2000)...)
	b := pipeline.New("route", pipeline.WithHandOverBatch(1))
	br := pipeline.Route(b, "r", pipeline.Source[int](b, "src", src), 2, func(v int) int { return v % 2 })
	var mu sync.Mutex
	written := map[int]bool{}
	pipeline.ForEach(b, "sink0", br[0], func(_ context.Context, v int) error {
		mu.Lock()
		written[v] = true
		mu.Unlock()
		return nil
	})
	fail := make(chan struct{})
	pipeline.ForEach(b, "sink1", br[1], func(ctx context.Context, v int) error {
		<-fail
		return resilience.MarkPermanent(errors.New("bad row"))
	})
	p := build(t, b)
	run := pipelinetest.Start(t.Context(), p)
	last, stable := -1, 0
	waitFor(t, func() bool {
		mu.Lock()
		n := len(written)
		mu.Unlock()
		if n == last && n > 0 {
			stable++
		} else {
			stable, last = 0, n
		}
		return stable > 20000
	})
	close(fail)
	_, err := run.Wait()
	require.Error(t, err)
	mu.Lock()
	defer mu.Unlock()
	var wrong []int
	for i, o := range src.Outcomes() {
		if written[i] && o[0] != node.Delivered {
			wrong = append(wrong, i)
		}
	}
	assert.Empty(t, wrong, "written on branch 0, yet reported not Delivered (of %d written)", len(written))
}

// A drain whose items settle on a fake clock nobody advances: the
// WithDrainTimeout timer is stopped when the run ends.
func TestDrainTimerStoppedAtRunEnd(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	src := &endless{watch: true, outcomes: map[int64][]node.Outcome{}}
	b := pipeline.New("drain", pipeline.WithClock(clock), pipeline.WithHandOverBatch(1), pipeline.WithDrainTimeout(time.Hour))
	var p *pipeline.Pipeline
	var n atomic.Int64
	pipeline.ForEach(b, "sink", pipeline.Source[int64](b, "src", src), func(context.Context, int64) error {
		if n.Add(1) == 10 {
			p.Drain()
		}
		return nil
	})
	p = build(t, b)
	_, err := p.Run(t.Context())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	assert.Error(t, clock.BlockUntilContext(ctx, 1), "no timer left on the clock")
}
