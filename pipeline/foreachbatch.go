package pipeline

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/node"
)

// ForEachBatch adds a sink that writes the items of in with f, a slice of
// up to size items per call: [MapBatch] for a bulk write, which ends the
// stream. A slice is written when it holds size items, when linger has
// passed on the pipeline's clock since its first item (linger 0 waits for
// a full slice), and when the input ends.
//
// f returns one error per item of ins, errs[i] for ins[i], or nil when
// every item was written. Each item keeps its own fate, as in MapBatch:
// an item whose error is nil is delivered; each other item goes through
// layer 1 alone, retried by calling f on a slice of that one item, and
// dead-lettered, skipped or failed alone, with its own key, tracker and
// counts. A slice of errors of another length than ins fails the items
// without an error with an error matching [ErrBatchResults], and a panic
// in f fails every item of its slice with the [*resilience.PanicError].
//
// f gets a new slice each call, which it may keep; with [ReuseSlice] the
// slice is lent for the call and f must not keep it.
//
// ForEachBatch takes Buffer, NodeResilience and ReuseSlice; Build refuses Parallel,
// Unordered, Keyed, Fallback, RateLimit and MaxParked, naming the node.
// The node's kind is [KindSink], and its counts are items, not slices.
func ForEachBatch[T any](b *Builder, name string, in Stream[T], size int, linger time.Duration, f func(context.Context, []T) []error, opts ...NodeOption) {
	n := b.add(name, KindSink, opts, in.s)
	n.callsOnSlices = true
	takeBatches[T](n)
	n.validate = batchChecks(n, "ForEachBatch", f == nil, size, linger)
	n.newEdge = edgeOf[T]
	n.newRunner = func(nr *nodeRun) runner {
		write := func(ctx context.Context, ins []T) ([]struct{}, []error) {
			return make([]struct{}, len(ins)), f(ctx, ins)
		}
		m := newBatchMap(nr, write, size, linger, newWriter([]edge[struct{}]{delivered{}}, nr.spec))
		m.written = true
		return m
	}
}

// delivered is the outlet of a ForEachBatch: an edge that nobody reads,
// which settles each item it is handed as delivered, and which the node's
// writer counts as the node's output, as a sink counts what it wrote.
type delivered struct{}

func (delivered) join()      {}
func (delivered) release()   {}
func (delivered) batch() int { return 1 }

func (delivered) take(old []envelope[struct{}]) []envelope[struct{}] { return old[:0] }

func (delivered) trySend(items []envelope[struct{}]) int {
	for i := range items {
		if tr := items[i].tr; tr != nil {
			tr.finish(node.Delivered)
		}
	}
	return len(items)
}

func (d delivered) send(_, _ context.Context, items []envelope[struct{}]) (int, error) {
	return d.trySend(items), nil
}

func (delivered) inlet() inlet[struct{}] {
	panic("sluice: a sink's outlet has no reader")
}
