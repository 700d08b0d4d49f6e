package bench_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// BenchmarkMapBatch moves b.N ints through source → x*2 on slices of 256
// → sink: the hand-written baseline hands slices of 256 between its
// goroutines (as BenchmarkBatched's does); MapBatch calls its function
// once per 256 items and hands each result on as an item. The first two
// engine variants emit and sink item by item, under the default profile
// (hand-over in batches of 64) and ProfileHighThroughput (256); the
// third has slices of 256 at both ends, as the baseline has, under
// ProfileHighThroughput, and the fourth is the third whose MapBatch
// lends its function one slice for every call (ReuseSlice), as the
// baseline recycles its slices.
func BenchmarkMapBatch(b *testing.B) {
	b.Run("impl=handwritten", handBatches)
	b.Run("impl=sluice-mapbatch", func(b *testing.B) { runMapBatch(b, nil) })
	b.Run("impl=sluice-mapbatch-high-throughput", func(b *testing.B) {
		runMapBatch(b, []pipeline.Option{pipeline.WithProfile(resilience.ProfileHighThroughput)})
	})
	b.Run("impl=sluice-mapbatch-slices", func(b *testing.B) {
		runMapBatchSlices(b, []pipeline.Option{pipeline.WithProfile(resilience.ProfileHighThroughput)})
	})
	b.Run("impl=sluice-mapbatch-slices-reuse", func(b *testing.B) {
		runMapBatchSlices(b, []pipeline.Option{pipeline.WithProfile(resilience.ProfileHighThroughput)}, pipeline.ReuseSlice())
	})
}

func runMapBatch(b *testing.B, opts []pipeline.Option) {
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
	dbl := pipeline.MapBatch(bl, "double", src, 256, 0, func(_ context.Context, in []int) ([]int, []error) {
		for i := range in {
			in[i] *= 2
		}
		return in, nil
	})
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

// runMapBatchSlices is runMapBatch with slices at both ends, as the
// hand-written baseline has: the source emits slices of 256, which
// Unbatch hands on item by item, and Batch gathers MapBatch's results
// into slices of 256 again for the sink, which sums each slice. nodeOpts
// are MapBatch's.
func runMapBatchSlices(b *testing.B, opts []pipeline.Option, nodeOpts ...pipeline.NodeOption) {
	const size = 256
	b.ReportAllocs()
	n := b.N
	bl := pipeline.New("bench", opts...)
	src := pipeline.Source(bl, "src", node.SourceFunc[[]int](func(ctx context.Context, out node.Emitter[[]int]) error {
		for i := 0; i < n; i += size {
			buf := make([]int, 0, size)
			for j := i; j < min(i+size, n); j++ {
				buf = append(buf, j)
			}
			if err := out.Emit(ctx, buf); err != nil {
				return err
			}
		}
		return nil
	}))
	items := pipeline.Unbatch(bl, "items", src)
	dbl := pipeline.MapBatch(bl, "double", items, size, 0, func(_ context.Context, in []int) ([]int, []error) {
		for i := range in {
			in[i] *= 2
		}
		return in, nil
	}, nodeOpts...)
	slices := pipeline.Batch(bl, "slices", dbl, size, 0)
	s := 0
	pipeline.Sink(bl, "sum", slices, node.SinkFunc[[]int](func(_ context.Context, in []int) error {
		for _, x := range in {
			s += x
		}
		return nil
	}))
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
