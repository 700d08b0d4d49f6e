package pipeline

import (
	"context"
	"sync/atomic"
	"time"
)

// An envelope is one item on its way between stages. tr is nil for an item
// nobody tracks, which is what keeps untracked items free of tracking cost.
type envelope[T any] struct {
	val T
	tr  *tracker
}

// A tally counts into a node's counter from one goroutine, adding to the
// shared atomic only every tallyEvery items and whenever its goroutine is
// about to wait, so that counting costs no atomic operation per item.
type tally struct {
	n   int64
	dst *atomic.Int64
}

const tallyEvery = 64

func (t *tally) add(k int64) {
	t.n += k
	if t.n >= tallyEvery {
		t.dst.Add(t.n)
		t.n = 0
	}
}

func (t *tally) flush() {
	if t.n != 0 {
		t.dst.Add(t.n)
		t.n = 0
	}
}

// An edge is the bounded channel into one input of a node. Stages hand
// items over in one of two ways, each a type of its own: an itemEdge
// carries one item per channel operation, a batchEdge carries slices of
// items, recycled, so that a hand-over costs one channel operation per
// batch. A writer gathers items and sends them whole; a reader receives
// them and hands them out one by one.
//
// Several writers may feed one edge (a merge, the workers of an unordered
// parallel node); the last to release it closes the channel, which tells
// the reader its input ended. A writer releases its edges only when its
// node finished cleanly: a failed or cancelled run ends through its
// context, so that no reader mistakes a failure for the end of its input.
type edge[T any] interface {
	// join adds a writer; release gives one up.
	join()
	release()
	// batch is how many items a writer gathers before it sends them.
	batch() int
	// take returns an empty slice to gather into: old, when the edge
	// does not keep the slices it is sent, or a recycled one.
	take(old []envelope[T]) []envelope[T]
	// trySend hands items over without waiting and returns how many were
	// taken. A batchEdge takes all or none, and takes the slice itself,
	// which the writer must not touch again.
	trySend(items []envelope[T]) int
	// send is trySend that waits while the channel is full, until ctx or
	// call is done (a nil call never is). It returns how many items were
	// taken: all of them unless err is not nil.
	send(ctx, call context.Context, items []envelope[T]) (int, error)
	// inlet returns the receiving side, for the node's one reader.
	inlet() inlet[T]
}

// An inlet is the receiving side of an edge.
type inlet[T any] interface {
	// poll returns the next items if some are ready; ended is set once the
	// input ended. The slice is the reader's until its next call.
	poll() (items []envelope[T], ended bool)
	// receive waits for the next items, until ctx is done or expired (nil:
	// never) fires.
	receive(ctx context.Context, expired <-chan time.Time) (items []envelope[T], ok, timedOut bool, err error)
}

// newEdge returns a per-item edge when batch is 1 and a batched edge
// otherwise. buffer is the channel's capacity in items.
func newEdge[T any](buffer, batch int) edge[T] {
	if batch > 1 {
		n := max(buffer/batch, 2)
		return &batchEdge[T]{size: batch, ch: make(chan []envelope[T], n), free: make(chan []envelope[T], n+2)}
	}
	return &itemEdge[T]{ch: make(chan envelope[T], max(buffer, 0))}
}

// writers counts an edge's writers; the last to release closes.
type writers struct{ n atomic.Int32 }

func (w *writers) join()      { w.n.Add(1) }
func (w *writers) last() bool { return w.n.Add(-1) == 0 }

// An itemEdge hands items over one channel operation each.
type itemEdge[T any] struct {
	writers
	ch  chan envelope[T]
	one [1]envelope[T] // the reader's last item, as a slice
}

func (e *itemEdge[T]) release() {
	if e.last() {
		close(e.ch)
	}
}

func (e *itemEdge[T]) batch() int                           { return 1 }
func (e *itemEdge[T]) take(old []envelope[T]) []envelope[T] { return old[:0] }
func (e *itemEdge[T]) inlet() inlet[T]                      { return e }

func (e *itemEdge[T]) send(ctx, call context.Context, items []envelope[T]) (int, error) {
	for i, env := range items {
		select {
		case e.ch <- env:
		case <-ctx.Done():
			return i, context.Cause(ctx)
		case <-done(call):
			return i, call.Err()
		}
	}
	return len(items), nil
}

func (e *itemEdge[T]) trySend(items []envelope[T]) int {
	for i, env := range items {
		select {
		case e.ch <- env:
		default:
			return i
		}
	}
	return len(items)
}

func (e *itemEdge[T]) poll() ([]envelope[T], bool) {
	select {
	case env, ok := <-e.ch:
		if !ok {
			return nil, true
		}
		e.one[0] = env
		return e.one[:], false
	default:
		return nil, false
	}
}

func (e *itemEdge[T]) receive(ctx context.Context, expired <-chan time.Time) ([]envelope[T], bool, bool, error) {
	select {
	case env, ok := <-e.ch:
		if !ok {
			return nil, false, false, nil
		}
		e.one[0] = env
		return e.one[:], true, false, nil
	case <-expired:
		return nil, false, true, nil
	case <-ctx.Done():
		return nil, false, false, context.Cause(ctx)
	}
}

// A batchEdge hands items over in slices of up to size items. The reader
// gives each slice back through free when it is done with it, so that a
// hand-over allocates nothing.
type batchEdge[T any] struct {
	writers
	size int
	ch   chan []envelope[T]
	free chan []envelope[T]
	cur  []envelope[T] // the slice the reader holds
}

func (e *batchEdge[T]) release() {
	if e.last() {
		close(e.ch)
	}
}

func (e *batchEdge[T]) batch() int      { return e.size }
func (e *batchEdge[T]) inlet() inlet[T] { return e }

func (e *batchEdge[T]) take([]envelope[T]) []envelope[T] {
	select {
	case b := <-e.free:
		return b[:0]
	default:
		return make([]envelope[T], 0, e.size)
	}
}

func (e *batchEdge[T]) send(ctx, call context.Context, items []envelope[T]) (int, error) {
	select {
	case e.ch <- items:
		return len(items), nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-done(call):
		return 0, call.Err()
	}
}

func (e *batchEdge[T]) trySend(items []envelope[T]) int {
	select {
	case e.ch <- items:
		return len(items)
	default:
		return 0
	}
}

// recycle gives the slice the reader held back to the writers. It goes
// back without being cleared: clearing would pull its cache lines to this
// core just before a writer fills them again on another, which costs more
// than the rest of the hand-over. The items it still points to are
// overwritten by the next batch; at most the free list's few batches are
// kept alive meanwhile.
func (e *batchEdge[T]) recycle() {
	if e.cur != nil {
		select {
		case e.free <- e.cur[:0]:
		default:
		}
		e.cur = nil
	}
}

func (e *batchEdge[T]) poll() ([]envelope[T], bool) {
	e.recycle()
	select {
	case b, ok := <-e.ch:
		if !ok {
			return nil, true
		}
		e.cur = b
		return b, false
	default:
		return nil, false
	}
}

func (e *batchEdge[T]) receive(ctx context.Context, expired <-chan time.Time) ([]envelope[T], bool, bool, error) {
	select {
	case b, ok := <-e.ch:
		if !ok {
			return nil, false, false, nil
		}
		e.cur = b
		return b, true, false, nil
	case <-expired:
		return nil, false, true, nil
	case <-ctx.Done():
		return nil, false, false, context.Cause(ctx)
	}
}

// done returns ctx's Done channel, or nil, which never fires, for a nil
// ctx.
func done(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}
