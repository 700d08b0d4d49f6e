package bench_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// BenchmarkLayers arms the resilience layers with nothing failing: what a
// pipeline pays for being ready. The baseline is the default pipeline.
func BenchmarkLayers(b *testing.B) {
	b.Run("impl=default", func(b *testing.B) { runEngine(b, nil) })
	b.Run("impl=breaker", func(b *testing.B) { runEngine(b, layers(breakerOn)) })
	b.Run("impl=restart", func(b *testing.B) { runEngine(b, layers(restartOn)) })
	b.Run("impl=all", func(b *testing.B) {
		runEngine(b, append(layers(breakerOn, restartOn, func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.OnItemFailure = resilience.DeadLetter
		}), pipeline.WithDeadLetter(deadletter.NewMemory(1))))
	})
}

func layers(fs ...func(*resilience.Options)) []pipeline.Option {
	var opts []pipeline.Option
	for _, f := range fs {
		opts = append(opts, pipeline.WithResilience(f))
	}
	return opts
}

func breakerOn(o *resilience.Options) {
	o.CircuitBreaker.Enabled = true
	o.CircuitBreaker.WhenOpen = resilience.OpenPause
}

func restartOn(o *resilience.Options) { o.NodeRestart.MaxRestarts = 3 }

// errOnce is built once, so that failing costs the hand-written loop no
// allocation of its own.
var errOnce = resilience.MarkTransient(errors.New("transient once"))

// BenchmarkRetryFires makes every item's first call fail transiently and
// its retry succeed, with no backoff: the added cost of one retry is the
// difference between a fail-once variant and its no-fail twin.
func BenchmarkRetryFires(b *testing.B) {
	b.Run("impl=handwritten-nofail", func(b *testing.B) { handRetry(b, false) })
	b.Run("impl=handwritten-failonce", func(b *testing.B) { handRetry(b, true) })
	b.Run("impl=sluice-nofail", func(b *testing.B) { runRetry(b, false) })
	b.Run("impl=sluice-failonce", func(b *testing.B) { runRetry(b, true) })
}

// failOnce doubles x; with fail set, its first call on each item fails.
type failOnce struct {
	fail bool
	last int
	seen bool
}

func (f *failOnce) call(x int) (int, error) {
	if f.fail && (!f.seen || f.last != x) {
		f.last, f.seen = x, true
		return 0, errOnce
	}
	return x * 2, nil
}

func runRetry(b *testing.B, fail bool) {
	f := &failOnce{fail: fail}
	runEngineWith(b, layers(func(o *resilience.Options) {
		o.ItemRetry.MaxRetries = 3
		o.ItemRetry.Backoff = resilience.NoBackoff()
	}), node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) { return f.call(x) }))
}

// handRetry is handChannels with a retry loop around the transform's call.
func handRetry(b *testing.B, fail bool) {
	b.ReportAllocs()
	f := &failOnce{fail: fail}
	n := b.N
	b.ResetTimer()
	a := make(chan int, 64)
	c := make(chan int, 64)
	done := make(chan int)
	go func() {
		for i := range n {
			a <- i
		}
		close(a)
	}()
	go func() {
		for v := range a {
			for attempt := 0; ; attempt++ {
				r, err := f.call(v)
				if err == nil {
					c <- r
					break
				}
				if attempt >= 3 || !resilience.IsTransient(err) {
					panic(err)
				}
			}
		}
		close(c)
	}()
	go func() {
		s := 0
		for v := range c {
			s += v
		}
		done <- s
	}()
	sinkSum = <-done
}

// spin burns about d of CPU, without sleeping, as a CPU-bound transform
// does.
func spin(d time.Duration) int {
	start := time.Now()
	x := 0
	for time.Since(start) < d {
		for i := range 100 {
			x += i
		}
	}
	return x
}

// BenchmarkCPUBound runs a transform of about 2 µs of CPU per item, on one
// worker and on ordered Parallel(2) and Parallel(4): the speed-up over one
// worker is the ratio of their times. This machine has two cores.
func BenchmarkCPUBound(b *testing.B) {
	work := node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) {
		return x + spin(2*time.Microsecond)&1, nil
	})
	b.Run("impl=sluice-p1", func(b *testing.B) { runEngineWith(b, nil, work) })
	b.Run("impl=sluice-p2", func(b *testing.B) { runEngineWith(b, nil, work, pipeline.Parallel(2)) })
	b.Run("impl=sluice-p4", func(b *testing.B) { runEngineWith(b, nil, work, pipeline.Parallel(4)) })
}
