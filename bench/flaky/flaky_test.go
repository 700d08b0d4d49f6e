// Package flaky_test measures the engine against a flaky dependency,
// beside a hand-written pool doing the same work in the same run (issue
// 28): a call that takes callTime, on workers workers, where some calls
// answer once "retry after" a wait. Each op is one whole run, so run it
// with -benchtime=1x (make bench does); ns/op is the run's duration.
//
// The figures of the issue (20 000 items, a 2 ms call, a 500 ms wait, a
// 30 s wait) are scaled down so that a run of today's engine, whose
// waiting retries hold a worker, ends in seconds: the wait to call ratio
// of the short wait is kept (250:1), which is what sets the slowdown of a
// pool that sleeps on its workers; the item count is not, since it does
// not change that ratio.
package flaky_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

const (
	items     = 4000
	workers   = 16
	callTime  = time.Millisecond
	shortWait = 250 * time.Millisecond // the 500 ms, scaled with the call
	// longWait stands for the 30 s: eight times a failure-free
	// run, long enough to see whether the other items wait behind it.
	longWait = 2 * time.Second
)

// A scenario says which items answer "retry after" on their first call,
// and how long they ask to wait.
type scenario struct {
	name  string
	fails func(i int) bool
	wait  time.Duration
}

var (
	noFail     = scenario{"nofail", func(int) bool { return false }, 0}
	tenPercent = scenario{"retry10pct", func(i int) bool { return i%10 == 5 }, shortWait}
	onePercent = scenario{"wait1pct", func(i int) bool { return i%100 == 50 }, longWait}
)

// dependency is the flaky call: it takes callTime, and answers the items
// its scenario picks with RetryAfter(wait) on their first call.
type dependency struct {
	sc    scenario
	tried []atomic.Bool
}

func newDependency(sc scenario) *dependency {
	return &dependency{sc: sc, tried: make([]atomic.Bool, items)}
}

var errBusy = errors.New("flaky: busy")

func (d *dependency) call(_ context.Context, i int) (int, error) {
	// The dependency's own time, on the real clock: a benchmark measures
	// wall time, and the engine's waits run on the real clock here too.
	time.Sleep(callTime)
	if d.sc.fails(i) && !d.tried[i].Swap(true) {
		return 0, resilience.RetryAfter(errBusy, d.sc.wait)
	}
	return i, nil
}

// watch samples the goroutine count while a run goes on and reports, once
// the run is over, its peak over the count before the run ("goroutines")
// and when the last item that did not wait, nor wait behind a waiting item
// of its key on a Keyed node, was delivered ("rest-ms").
type watch struct {
	sc scenario
	// behind, when set, says whether item i waits behind an item that
	// waits (a Keyed node's earlier item of its key): per-key order holds
	// it back, so it is not one of the rest either.
	behind func(i int) bool
	start  time.Time
	base   int
	peak   atomic.Int64
	rest   atomic.Int64 // ns since start
	stop   chan struct{}
	done   sync.WaitGroup
}

func startWatch(sc scenario) *watch {
	w := &watch{sc: sc, start: time.Now(), base: runtime.NumGoroutine(), stop: make(chan struct{})}
	w.done.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if n := int64(runtime.NumGoroutine()); n > w.peak.Load() {
				w.peak.Store(n)
			}
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	})
	return w
}

// delivered records item i's delivery.
func (w *watch) delivered(i int) {
	if w.sc.fails(i) || (w.behind != nil && w.behind(i)) {
		return
	}
	since := int64(time.Since(w.start))
	for {
		old := w.rest.Load()
		if since <= old || w.rest.CompareAndSwap(old, since) {
			return
		}
	}
}

func (w *watch) report(b *testing.B, got int) {
	close(w.stop)
	w.done.Wait()
	if got != items {
		b.Fatalf("%d items delivered, want %d", got, items)
	}
	// The sampler is one of the goroutines it counts.
	b.ReportMetric(float64(w.peak.Load()-int64(w.base)-1), "goroutines")
	b.ReportMetric(float64(w.rest.Load())/1e6, "rest-ms")
}

// handPool is the hand-written baseline: workers goroutines take items
// from a channel and call the dependency, sleeping on the worker for the
// wait a failed call asks for, as failsafe-go, Watermill's retry
// middleware and most hand-written pools do.
func handPool(b *testing.B, sc scenario) {
	for b.Loop() {
		dep := newDependency(sc)
		w := startWatch(sc)
		in := make(chan int, workers)
		out := make(chan int, workers)
		go func() {
			for i := range items {
				in <- i
			}
			close(in)
		}()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range in {
					for {
						v, err := dep.call(context.Background(), i)
						if err == nil {
							out <- v
							break
						}
						d, _ := resilience.RetryAfterOf(err)
						time.Sleep(d)
					}
				}
			})
		}
		go func() { wg.Wait(); close(out) }()
		got := 0
		for v := range out {
			w.delivered(v)
			got++
		}
		w.report(b, got)
	}
}

// engine runs the same work through source → call (with opts) → sink.
func engine(b *testing.B, sc scenario, opts ...pipeline.NodeOption) {
	engineBehind(b, sc, nil, opts...)
}

// engineBehind is engine, where the items behind says are not counted in
// rest-ms.
func engineBehind(b *testing.B, sc scenario, behind func(int) bool, opts ...pipeline.NodeOption) {
	for b.Loop() {
		dep := newDependency(sc)
		bl := pipeline.New("flaky", pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 1
		}))
		src := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
			for i := range items {
				if err := out.Emit(ctx, i); err != nil {
					return err
				}
			}
			return nil
		}))
		called := pipeline.Map(bl, "call", src, dep.call, opts...)
		var w *watch
		got := 0
		pipeline.ForEach(bl, "sink", called, func(_ context.Context, v int) error {
			w.delivered(v)
			got++
			return nil
		})
		p, err := bl.Build()
		if err != nil {
			b.Fatal(err)
		}
		w = startWatch(sc)
		w.behind = behind
		if _, err := p.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		w.report(b, got)
	}
}

// keyed16 spreads the items over 997 keys, about four each. The key must
// not follow the scenarios' failure pattern (every tenth, every hundredth
// item): with i % 1000 each failing item's key held three more failing
// items, 1 000 apart, and a key's items are called one after the other,
// so each key's four waits followed each other (4 × 2 s in the 1 % run)
// whatever the engine does. With 997, a prime, the failing items all have
// distinct keys and their waits can overlap.
func keyed16() pipeline.NodeOption {
	return pipeline.Keyed(workers, func(i int) int { return i % keys })
}

const keys = 997

// behindKey says whether an earlier item of i's key waits under sc.
func behindKey(sc scenario) func(int) bool {
	return func(i int) bool {
		for j := i - keys; j >= 0; j -= keys {
			if sc.fails(j) {
				return true
			}
		}
		return false
	}
}

// flaky runs each node kind beside the hand-written pool under sc.
func flaky(b *testing.B, sc scenario) {
	b.Run("impl=handwritten", func(b *testing.B) { handPool(b, sc) })
	b.Run("impl=sluice-keyed16", func(b *testing.B) { engineBehind(b, sc, behindKey(sc), keyed16()) })
	b.Run("impl=sluice-unordered16", func(b *testing.B) {
		engine(b, sc, pipeline.Parallel(workers), pipeline.Unordered())
	})
	b.Run("impl=sluice-ordered16", func(b *testing.B) { engine(b, sc, pipeline.Parallel(workers)) })
}

// BenchmarkFlakyNoFail is the failure-free run every other figure is
// compared with.
func BenchmarkFlakyNoFail(b *testing.B) { flaky(b, noFail) }

// BenchmarkFlakyRetryAfter10Pct: 10 % of the calls answer once "retry
// after shortWait". Target (issue 28): Keyed(16) and unordered
// Parallel(16) within 1.2x of BenchmarkFlakyNoFail, ordered within 2x.
func BenchmarkFlakyRetryAfter10Pct(b *testing.B) { flaky(b, tenPercent) }

// BenchmarkFlakyLongWait1Pct: 1 % of the calls answer once "retry after
// longWait". Target: rest-ms, when the other 99 % were delivered, stays
// near the failure-free run's.
func BenchmarkFlakyLongWait1Pct(b *testing.B) { flaky(b, onePercent) }
