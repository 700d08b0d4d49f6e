package bench_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// routeBranches is how many branches the Route benchmarks deal items to,
// item i going to branch i mod routeBranches.
const routeBranches = 4

// BenchmarkRoute4 moves b.N ints from a source through a Route to four
// sinks, each item to one: the hand-written baseline is a router goroutine
// that sends each item on its branch's channel of 64 to that branch's
// goroutine.
func BenchmarkRoute4(b *testing.B) {
	b.Run("impl=handwritten", handRouter)
	b.Run("impl=sluice-route", func(b *testing.B) { runRoute(b) })
}

func handRouter(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	b.ResetTimer()
	var outs [routeBranches]chan int
	for i := range outs {
		outs[i] = make(chan int, 64)
	}
	go func() {
		for i := range n {
			outs[i%routeBranches] <- i
		}
		for _, o := range outs {
			close(o)
		}
	}()
	var wg sync.WaitGroup
	var sums [routeBranches]int
	for i, o := range outs {
		wg.Go(func() {
			for v := range o {
				sums[i] += v
			}
		})
	}
	wg.Wait()
	sinkSum = sums[0]
}

func runRoute(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	bl := pipeline.New("bench")
	src := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	branches := pipeline.Route(bl, "route", src, routeBranches, func(x int) int { return x % routeBranches })
	var sums [routeBranches]int
	for i, br := range branches {
		pipeline.ForEach(bl, "sum"+string(rune('0'+i)), br, func(_ context.Context, x int) error { sums[i] += x; return nil })
	}
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	sinkSum = sums[0]
}
