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

// An edge is the bounded channel into one input of a node. Several writers
// may feed it (a merge, the workers of an unordered parallel node); the last
// writer to finish closes it. In batch mode the channel carries slices of
// envelopes, recycled through free, so that a hand-over costs one channel
// operation per batch instead of per item.
type edge[T any] struct {
	items   chan envelope[T]   // per-item mode
	batches chan []envelope[T] // batch mode
	free    chan []envelope[T] // batch slices handed back by the reader
	batch   int                // items per batch; 0 in per-item mode
	writers atomic.Int32
}

func newEdge[T any](buffer, batch int) *edge[T] {
	e := &edge[T]{}
	if batch > 1 {
		n := max(buffer/batch, 2)
		e.batch = batch
		e.batches = make(chan []envelope[T], n)
		e.free = make(chan []envelope[T], n+2)
	} else {
		e.items = make(chan envelope[T], max(buffer, 0))
	}
	return e
}

func (e *edge[T]) release() {
	if e.writers.Add(-1) == 0 {
		if e.batch > 0 {
			close(e.batches)
		} else {
			close(e.items)
		}
	}
}

// take returns an empty batch slice, recycled when one is free.
func (e *edge[T]) take() []envelope[T] {
	select {
	case b := <-e.free:
		return b[:0]
	default:
		return make([]envelope[T], 0, e.batch)
	}
}

// A writer sends one producer's items to every edge of its output stream:
// one edge normally, several when the stream is broadcast. A writer belongs
// to one goroutine at a time.
type writer[T any] struct {
	edges []*edge[T]
	// single is the only edge in batch mode without broadcast, the common
	// case, which push serves without a loop; buf is its pending batch.
	single  *edge[T]
	buf     []envelope[T]
	pending [][]envelope[T] // batch mode with broadcast: each edge's pending batch
	out     tally           // the node's Out counter
	// user is the context a source passed to Emit when it is not the
	// node's own; blocking sends watch it too.
	user context.Context
}

// userDone returns the Done channel of the context a source passed to Emit,
// or nil, which never fires.
func (w *writer[T]) userDone() <-chan struct{} {
	if w.user == nil {
		return nil
	}
	return w.user.Done()
}

func newWriter[T any](edges []*edge[T], out *atomic.Int64) *writer[T] {
	w := &writer[T]{edges: edges, out: tally{dst: out}}
	for _, e := range edges {
		e.writers.Add(1)
	}
	switch {
	case len(edges) == 1 && edges[0].batch > 0:
		w.single = edges[0]
		w.buf = w.single.take()
	case len(edges) > 1 && edges[0].batch > 0:
		w.pending = make([][]envelope[T], len(edges))
	}
	return w
}

// push hands env to every edge, blocking while an edge is full. In batch
// mode the item joins the pending batch, which is sent when it is full or
// when the item is tracked, whose completion someone waits for; the node
// also flushes whenever its own input runs dry (see reader.idle).
func (w *writer[T]) push(ctx context.Context, env envelope[T]) error {
	// The common case, small enough to be inlined: batch mode without
	// broadcast, an untracked item, and room left in the batch.
	if w.single != nil && env.tr == nil && len(w.buf)+1 < w.single.batch {
		w.buf = append(w.buf, env)
		return nil
	}
	return w.pushSlow(ctx, env)
}

func (w *writer[T]) pushSlow(ctx context.Context, env envelope[T]) error {
	if e := w.single; e != nil {
		w.buf = append(w.buf, env)
		if len(w.buf) >= e.batch || env.tr != nil {
			return w.sendSingle(ctx)
		}
		return nil
	}
	if len(w.edges) > 1 && env.tr != nil {
		env.tr.add(len(w.edges) - 1)
	}
	if w.pending == nil {
		for _, e := range w.edges {
			select {
			case e.items <- env:
				continue
			default:
			}
			w.out.flush()
			select {
			case e.items <- env:
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-w.userDone():
				return w.user.Err()
			}
		}
		w.out.add(1)
		return nil
	}
	w.out.add(1)
	for i, e := range w.edges {
		p := w.pending[i]
		if p == nil {
			p = e.take()
		}
		p = append(p, env)
		w.pending[i] = p
		if len(p) >= e.batch || env.tr != nil {
			if err := w.send(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *writer[T]) sendSingle(ctx context.Context) error {
	if len(w.buf) == 0 {
		return nil
	}
	w.out.n += int64(len(w.buf))
	w.out.flush()
	e := w.single
	select {
	case e.batches <- w.buf:
	default:
		select {
		case e.batches <- w.buf:
		case <-ctx.Done():
			w.out.n -= int64(len(w.buf))
			return context.Cause(ctx)
		case <-w.userDone():
			w.out.n -= int64(len(w.buf))
			return w.user.Err()
		}
	}
	w.buf = e.take()
	return nil
}

func (w *writer[T]) send(ctx context.Context, i int) error {
	p := w.pending[i]
	if len(p) == 0 {
		return nil
	}
	e := w.edges[i]
	select {
	case e.batches <- p:
		w.pending[i] = nil
		return nil
	default:
	}
	w.out.flush()
	select {
	case e.batches <- p:
		w.pending[i] = nil
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.userDone():
		return w.user.Err()
	}
}

// hasPending reports whether items wait in a batch not yet sent.
func (w *writer[T]) hasPending() bool {
	if w.single != nil {
		return len(w.buf) > 0
	}
	for _, p := range w.pending {
		if len(p) > 0 {
			return true
		}
	}
	return false
}

// tryFlush sends what is pending to every edge that has room, without
// blocking.
func (w *writer[T]) tryFlush() {
	if e := w.single; e != nil {
		if len(w.buf) == 0 {
			return
		}
		select {
		case e.batches <- w.buf:
			w.out.n += int64(len(w.buf))
			w.out.flush()
			w.buf = e.take()
		default:
		}
		return
	}
	for i, p := range w.pending {
		if len(p) == 0 {
			continue
		}
		select {
		case w.edges[i].batches <- p:
			w.pending[i] = nil
		default:
		}
	}
	w.out.flush()
}

// flush sends every pending batch and publishes the count.
func (w *writer[T]) flush(ctx context.Context) error {
	if w.single != nil {
		return w.sendSingle(ctx)
	}
	w.out.flush()
	for i := range w.pending {
		if err := w.send(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// close flushes and gives up the writer's share of its edges; the last
// writer of an edge closes it, which tells its reader the input ended.
// close is called only when the producer finished without error: a failed
// run ends through its context instead, so that no reader mistakes a
// failure for the end of its input.
func (w *writer[T]) close(ctx context.Context) error {
	if err := w.flush(ctx); err != nil {
		return err
	}
	for _, e := range w.edges {
		e.release()
	}
	w.edges, w.single = nil, nil
	return nil
}

// A reader takes one node's input items from its edge. It belongs to one
// goroutine at a time.
type reader[T any] struct {
	e    *edge[T]
	cur  []envelope[T] // batch mode: the batch being read
	i    int           // the next item of cur
	one  [1]envelope[T]
	in   tally        // the node's In counter
	stop *atomic.Bool // the run is stopping
	// idle runs before the reader blocks on an empty edge: the node sends
	// what it gathered, so that items never wait behind an idle input.
	idle func(ctx context.Context) error
}

func newReader[T any](e *edge[T], in *atomic.Int64, stop *atomic.Bool) *reader[T] {
	return &reader[T]{e: e, in: tally{dst: in}, stop: stop}
}

// next returns the next item; ok is false once the input ended. It returns
// an error once ctx is done.
func (r *reader[T]) next(ctx context.Context) (envelope[T], bool, error) {
	if r.i < len(r.cur) && !r.stop.Load() {
		env := r.cur[r.i]
		r.i++
		r.in.add(1)
		return env, true, nil
	}
	items, ok, _, err := r.more(ctx, nil)
	if !ok || err != nil {
		return envelope[T]{}, ok, err
	}
	r.i = 1
	r.cur = items
	r.in.add(1)
	return items[0], true, nil
}

// nextRun returns the items left of the current batch, at least one, or the
// next batch; in per-item mode it returns one item. The caller is done with
// the slice when it calls the reader again. ok is false once the input
// ended.
func (r *reader[T]) nextRun(ctx context.Context) ([]envelope[T], bool, error) {
	if r.i < len(r.cur) && !r.stop.Load() {
		s := r.cur[r.i:]
		r.i = len(r.cur)
		r.in.add(int64(len(s)))
		return s, true, nil
	}
	items, ok, _, err := r.more(ctx, nil)
	if !ok || err != nil {
		return nil, ok, err
	}
	r.cur, r.i = items, len(items)
	r.in.add(int64(len(items)))
	return items, true, nil
}

// nextOr is next that also returns, with timedOut set, when expired fires
// before an item arrives. A nil expired never fires.
func (r *reader[T]) nextOr(ctx context.Context, expired <-chan time.Time) (env envelope[T], ok, timedOut bool, err error) {
	select {
	case <-expired:
		return env, false, true, nil
	default:
	}
	if r.i < len(r.cur) {
		env, ok, err = r.next(ctx)
		return env, ok, false, err
	}
	items, ok, timedOut, err := r.more(ctx, expired)
	if !ok || err != nil || timedOut {
		return env, ok, timedOut, err
	}
	r.cur, r.i = items, 1
	r.in.add(1)
	return items[0], true, false, nil
}

// more receives the next batch, or the next item as a batch of one. Before
// it blocks it publishes the count and runs idle; at the end of the input it
// publishes the count.
func (r *reader[T]) more(ctx context.Context, expired <-chan time.Time) (items []envelope[T], ok, timedOut bool, err error) {
	items, ok, timedOut, err = r.receive(ctx, expired)
	if !ok && !timedOut {
		r.in.flush()
	}
	return items, ok, timedOut, err
}

func (r *reader[T]) receive(ctx context.Context, expired <-chan time.Time) (items []envelope[T], ok, timedOut bool, err error) {
	if r.stop.Load() {
		return nil, false, false, context.Cause(ctx)
	}
	if r.e.batch == 0 {
		select {
		case r.one[0], ok = <-r.e.items:
			return r.one[:], ok, false, nil
		default:
		}
		if err := r.wait(ctx); err != nil {
			return nil, false, false, err
		}
		select {
		case r.one[0], ok = <-r.e.items:
			return r.one[:], ok, false, nil
		case <-expired:
			return nil, false, true, nil
		case <-ctx.Done():
			return nil, false, false, context.Cause(ctx)
		}
	}
	if r.cur != nil {
		// The slice goes back without being cleared: clearing would pull
		// its cache lines to this core just before the writer fills them
		// again on another, which costs more than the rest of the hand-over.
		// The items it still points to are overwritten by the next batch;
		// at most the free list's few batches are kept alive meanwhile.
		select {
		case r.e.free <- r.cur[:0]:
		default:
		}
		r.cur, r.i = nil, 0
	}
	select {
	case items, ok = <-r.e.batches:
		return items, ok, false, nil
	default:
	}
	if err := r.wait(ctx); err != nil {
		return nil, false, false, err
	}
	select {
	case items, ok = <-r.e.batches:
		return items, ok, false, nil
	case <-expired:
		return nil, false, true, nil
	case <-ctx.Done():
		return nil, false, false, context.Cause(ctx)
	}
}

func (r *reader[T]) wait(ctx context.Context) error {
	r.in.flush()
	if r.idle != nil {
		return r.idle(ctx)
	}
	return nil
}
