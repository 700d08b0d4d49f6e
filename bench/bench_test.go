// Package bench_test measures the engine beside hand-written baselines
// that do the same work, in the same run, so that ratios are fair. Run it
// with make bench.
package bench_test

import (
	"context"
	"hash/maphash"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

var sinkSum int

// Each benchmark moves b.N ints through source → transform(x*2) → sink, so
// ns/op is ns per item. Sub-benchmarks named impl=handwritten are the
// baselines; benchstat -col /impl puts every engine variant beside them.

func BenchmarkPerItem(b *testing.B) {
	b.Run("impl=handwritten", handChannels)
	b.Run("impl=sluice-default", func(b *testing.B) { runEngine(b, nil) })
	b.Run("impl=sluice-per-item", func(b *testing.B) {
		runEngine(b, []pipeline.Option{pipeline.WithHandOverBatch(1)})
	})
}

func BenchmarkBatched(b *testing.B) {
	b.Run("impl=handwritten", handBatches)
	b.Run("impl=sluice-high-throughput", func(b *testing.B) {
		runEngine(b, []pipeline.Option{pipeline.WithProfile(resilience.ProfileHighThroughput)})
	})
}

func BenchmarkOrdered2(b *testing.B) {
	b.Run("impl=handwritten", handOrderedFanOut)
	b.Run("impl=sluice-parallel2", func(b *testing.B) { runEngine(b, nil, pipeline.Parallel(2)) })
}

// BenchmarkKeyed2 moves the items over 1 000 keys (i mod 1000) through two
// workers that keep each key's order: the hand-written baseline is the
// usual key-partitioned fan-out (each key always on the same worker, by
// its hash), beside Keyed(2) and, for the speed of plain parallel work,
// Parallel(2).
func BenchmarkKeyed2(b *testing.B) {
	b.Run("impl=handwritten", handKeyedFanOut)
	b.Run("impl=sluice-parallel2", func(b *testing.B) { runEngine(b, nil, pipeline.Parallel(2)) })
	b.Run("impl=sluice-keyed2", func(b *testing.B) {
		runEngine(b, nil, pipeline.Keyed(2, func(x int) int { return x % 1000 }))
	})
}

// handKeyedFanOut deals each item to the worker its key hashes to, over
// channels of 32, and merges the workers' results into one channel: each
// key's items stay in order, across keys in none.
func handKeyedFanOut(b *testing.B) {
	b.ReportAllocs()
	const workers = 2
	n := b.N
	b.ResetTimer()
	var in [workers]chan int
	for w := range workers {
		in[w] = make(chan int, 32)
	}
	out := make(chan int, 64)
	seed := maphash.MakeSeed()
	go func() {
		for i := range n {
			in[maphash.Comparable(seed, i%1000)%workers] <- i
		}
		for w := range workers {
			close(in[w])
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for v := range in[w] {
				out <- v * 2
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	s := 0
	for v := range out {
		s += v
	}
	sinkSum = s
}

// handChannels is a source, a transform and a sink written by hand as three
// goroutines joined by channels of 64 items.
func handChannels(b *testing.B) {
	b.ReportAllocs()
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
			c <- v * 2
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

// handBatches is the same, handing over slices of 256 items.
func handBatches(b *testing.B) {
	b.ReportAllocs()
	const size = 256
	n := b.N
	b.ResetTimer()
	a := make(chan []int, 4)
	c := make(chan []int, 4)
	freeA := make(chan []int, 8)
	freeC := make(chan []int, 8)
	get := func(free chan []int) []int {
		select {
		case s := <-free:
			return s[:0]
		default:
			return make([]int, 0, size)
		}
	}
	done := make(chan int)
	go func() {
		buf := get(freeA)
		for i := range n {
			buf = append(buf, i)
			if len(buf) == size {
				a <- buf
				buf = get(freeA)
			}
		}
		if len(buf) > 0 {
			a <- buf
		}
		close(a)
	}()
	go func() {
		for in := range a {
			out := get(freeC)
			for _, v := range in {
				out = append(out, v*2)
			}
			select {
			case freeA <- in:
			default:
			}
			c <- out
		}
		close(c)
	}()
	go func() {
		s := 0
		for in := range c {
			for _, v := range in {
				s += v
			}
			select {
			case freeC <- in:
			default:
			}
		}
		done <- s
	}()
	sinkSum = <-done
}

func runEngine(b *testing.B, opts []pipeline.Option, nopts ...pipeline.NodeOption) {
	runEngineWith(b, opts, node.TransformFunc[int, int](func(_ context.Context, x int) (int, error) { return x * 2, nil }), nopts...)
}

// runEngineWith moves b.N ints through source → t → sink.
func runEngineWith(b *testing.B, opts []pipeline.Option, t node.Transform[int, int], nopts ...pipeline.NodeOption) {
	b.ReportAllocs()
	n := b.N
	bl := pipeline.New("bench", opts...)
	src := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	dbl := pipeline.Transform(bl, "double", src, t, nopts...)
	s := 0
	pipeline.Sink(bl, "sum", dbl, node.SinkFunc[int](func(_ context.Context, x int) error { s += x; return nil }))
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	sinkSum = s
}

// handOrderedFanOut is a hand-written ordered fan-out over two workers: the
// source deals items round robin to the workers' channels and a collector
// reads their results in the same round, so order is kept.
func handOrderedFanOut(b *testing.B) {
	b.ReportAllocs()
	const workers = 2
	n := b.N
	b.ResetTimer()
	var in, out [workers]chan int
	for w := range workers {
		in[w] = make(chan int, 32)
		out[w] = make(chan int, 32)
	}
	go func() {
		for i := range n {
			in[i%workers] <- i
		}
		for w := range workers {
			close(in[w])
		}
	}()
	for w := range workers {
		go func() {
			for v := range in[w] {
				out[w] <- v * 2
			}
			close(out[w])
		}()
	}
	sorted := make(chan int, 64)
	go func() {
		for i := 0; ; i++ {
			v, ok := <-out[i%workers]
			if !ok {
				break
			}
			sorted <- v
		}
		close(sorted)
	}()
	s := 0
	for v := range sorted {
		s += v
	}
	sinkSum = s
}
