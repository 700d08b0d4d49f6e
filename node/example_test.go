package node_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// lines is a Source: Run emits each line, then returns nil as its input
// is exhausted. It stops when Emit fails, as the run is stopping.
type lines []string

func (l lines) Run(ctx context.Context, out node.Emitter[string]) error {
	for _, s := range l {
		if err := out.Emit(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// batchWriter is a Sink that buffers: Write adds to the batch, Flush
// writes what is left once the last item is in, and Close releases what
// Open acquired. The engine finds Open, Flush and Close by asking whether
// the sink implements node.Opener, node.Flusher and node.Closer.
type batchWriter struct {
	size  int
	batch []string
}

func (w *batchWriter) Open(context.Context) error {
	fmt.Println("open")
	return nil
}

func (w *batchWriter) Write(_ context.Context, s string) error {
	w.batch = append(w.batch, s)
	if len(w.batch) == w.size {
		w.writeBatch()
	}
	return nil
}

func (w *batchWriter) Flush(context.Context) error {
	w.writeBatch()
	return nil
}

func (w *batchWriter) Close(context.Context) error {
	fmt.Println("close")
	return nil
}

func (w *batchWriter) writeBatch() {
	if len(w.batch) > 0 {
		fmt.Println("write", w.batch)
		w.batch = w.batch[:0]
	}
}

var (
	_ node.Source[string] = lines(nil)
	_ node.Sink[string]   = (*batchWriter)(nil)
	_ node.Opener         = (*batchWriter)(nil)
	_ node.Flusher        = (*batchWriter)(nil)
	_ node.Closer         = (*batchWriter)(nil)
)

// A user implements the contracts of package node: with a type, for a node
// with state or a lifecycle (the source and the buffering sink here), or
// with a plain function adapted by TransformFunc, SourceFunc or SinkFunc.
// Package pipeline runs them.
func Example() {
	b := pipeline.New("words")
	src := pipeline.Source[string](b, "read", lines{"sluice", "moves", "water"})
	upper := pipeline.Transform(b, "upper", src,
		node.TransformFunc[string, string](func(_ context.Context, s string) (string, error) {
			return strings.ToUpper(s), nil
		}))
	pipeline.Sink(b, "store", upper, &batchWriter{size: 2})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// open
	// write [SLUICE MOVES]
	// write [WATER]
	// close
}

// Combine gives the outcome of an item whose parts ended differently, as
// after a broadcast: the more severe one.
func ExampleOutcome_Combine() {
	fmt.Println(node.Delivered.Combine(node.Filtered))
	fmt.Println(node.Delivered.Combine(node.DeadLettered))
	var none node.Outcome // no outcome yet
	fmt.Println(none.Combine(node.Skipped))
	// Output:
	// delivered
	// dead_lettered
	// skipped
}
