package pipeline

import (
	"context"
	"slices"
	"sync/atomic"
	"unsafe"
)

// A writer sends one producer's items to the edges of its output stream:
// one edge normally, several when the stream is broadcast or routed. It
// gathers up to one batch of the edges' size and sends it whole; a tracked
// item is sent at once, with what was gathered before it, because someone
// waits for its completion; the node also flushes whenever its own input
// runs dry (see reader.idle). Per-item edges have a batch of one, so every item is sent
// as it comes. A writer belongs to one goroutine at a time.
//
// Every method that may wait takes the context of the node, which ends the
// wait when the run stops. A source's Emit also gives the context of its
// call: it governs that call alone and is never kept.
type writer[T any] struct {
	buf []envelope[T] // gathered, not yet sent
	max int           // the edges' batch size
	one edge[T]       // the only edge; nil when the stream has several
	// keeps is set when the edge keeps the slices it is sent (a
	// batchEdge): buf is then replaced after each send, else reused.
	keeps bool
	fan   *fanOut[T] // the edges of a broadcast or routed stream
	out   tally      // the node's Out counter
	// size is the items in one output item, when the node gives batches
	// (nil otherwise), and batches its OutBatches counter.
	size    func(T) int
	batches *atomic.Int64
	// hold makes add gather tracked items too, as untracked ones are,
	// until the batch is full: a source's burst between BeginBatch and
	// EndBatch, which sends what is left.
	hold bool
}

func newWriter[T any](edges []edge[T], n *spec) *writer[T] {
	w := &writer[T]{max: edges[0].batch(), out: tally{dst: &n.stats.out}, size: sizeOf[T](n.outSize), batches: &n.stats.outBatches}
	for _, e := range edges {
		e.join()
	}
	if len(edges) == 1 {
		w.one = edges[0]
		w.buf = w.one.take(nil)
		_, w.keeps = w.one.(*batchEdge[T])
	} else {
		w.fan = newFanOut(edges)
	}
	return w
}

// push hands env on: it joins the gathered items, which are sent when they
// fill a batch or env is tracked. It fails only when ctx is done.
func (w *writer[T]) push(ctx context.Context, env envelope[T]) error {
	// The common case, small enough to be inlined: an untracked item and
	// room left in the batch.
	if (env.tr == nil || env.tr.quiet) && len(w.buf)+1 < w.max {
		w.buf = append(w.buf, env)
		return nil
	}
	return w.addSend(ctx, nil, env)
}

// pushVals is push of an untracked envelope for each of vals, in order:
// it gathers as many as the batch has room for in one loop, and pushes
// the one that fills it. It returns how many it took, all of them unless
// ctx is done.
func (w *writer[T]) pushVals(ctx context.Context, vals []T) (int, error) {
	took := 0
	for took < len(vals) {
		k := min(len(vals)-took, max(w.max-1-len(w.buf), 0))
		n := len(w.buf)
		w.buf = slices.Grow(w.buf, k)[:n+k]
		// A recycled slice may still point to the trackers of its last
		// batch (edges recycle slices uncleared). The values are set
		// alone, with no write barrier per item, and the trackers read
		// as they go: only a slice that held a tracked item has them
		// cleared. Clearing every slice cost about 13 instructions an
		// item on long runs, most of it the bulk write barrier of the
		// clear while the collector marks.
		dst, src := w.buf[n:n+k], vals[took:took+k]
		if setVals(dst, src) != 0 {
			clearTrackers(dst)
		}
		if took += k; took == len(vals) {
			break
		}
		if err := w.addSend(ctx, nil, envelope[T]{val: vals[took]}); err != nil {
			return took, err
		}
		took++
	}
	return took, nil
}

// setVals sets the value of each envelope of dst to the value of src at
// its place (len(src) ≥ len(dst)), eight at a time, and returns the OR of
// the addresses of the trackers dst held: 0 when none, with no branch
// per item.
func setVals[T any](dst []envelope[T], src []T) (trackers uintptr) {
	src = src[:len(dst)]
	i := 0
	for ; len(dst)-i >= 8; i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		trackers |= uintptr(unsafe.Pointer(d[0].tr)) | uintptr(unsafe.Pointer(d[1].tr)) |
			uintptr(unsafe.Pointer(d[2].tr)) | uintptr(unsafe.Pointer(d[3].tr)) |
			uintptr(unsafe.Pointer(d[4].tr)) | uintptr(unsafe.Pointer(d[5].tr)) |
			uintptr(unsafe.Pointer(d[6].tr)) | uintptr(unsafe.Pointer(d[7].tr))
		d[0].val, d[1].val, d[2].val, d[3].val = s[0], s[1], s[2], s[3]
		d[4].val, d[5].val, d[6].val, d[7].val = s[4], s[5], s[6], s[7]
	}
	for ; i < len(dst); i++ {
		trackers |= uintptr(unsafe.Pointer(dst[i].tr))
		dst[i].val = src[i]
	}
	return trackers
}

// clearTrackers drops the trackers of envs.
func clearTrackers[T any](envs []envelope[T]) {
	for i := range envs {
		envs[i].tr = nil
	}
}

// add is push for a source's Emit, whose call may end its wait. On error
// env was not taken and is no longer gathered; what was gathered before it
// stays, to be sent later.
func (w *writer[T]) add(ctx, call context.Context, env envelope[T]) error {
	if (env.tr == nil || env.tr.quiet || w.hold) && len(w.buf)+1 < w.max {
		w.buf = append(w.buf, env)
		return nil
	}
	return w.addSend(ctx, call, env)
}

// addSend gathers env and sends what is gathered.
func (w *writer[T]) addSend(ctx, call context.Context, env envelope[T]) error {
	w.buf = append(w.buf, env)
	taken, err := w.send(ctx, call)
	if !taken {
		n := len(w.buf) - 1
		w.buf[n] = envelope[T]{}
		w.buf = w.buf[:n]
	}
	return err
}

// send hands over what is gathered, waiting while an edge is full. taken
// reports whether the newest gathered item was taken; items are taken in
// order, so when it was, everything was.
func (w *writer[T]) send(ctx, call context.Context) (taken bool, err error) {
	if w.fan != nil {
		w.out.flush()
		committed, err := w.fan.send(ctx, call, w.buf)
		if committed {
			w.count(w.buf)
			clear(w.buf)
			w.buf = w.buf[:0]
		}
		return committed, err
	}
	if len(w.buf) == 0 {
		return true, nil
	}
	pre := w.precount()
	w.taken(w.one.trySend(w.buf), pre)
	if len(w.buf) > 0 {
		// Publish the count before waiting, so that Stats shows what a
		// blocked stage did.
		w.out.flush()
		var n int
		n, err = w.one.send(ctx, call, w.buf)
		w.taken(n, pre)
	}
	return len(w.buf) == 0, err
}

// count counts the items of envs, which an edge took, in Out.
func (w *writer[T]) count(envs []envelope[T]) {
	if w.size == nil {
		w.out.add(int64(len(envs)))
		return
	}
	for i := range envs {
		w.out.add(int64(w.size(envs[i].val)))
	}
	w.batches.Add(int64(len(envs)))
}

// precount returns the items in what is gathered when the edge keeps the
// slices it is sent, whose items the writer may no longer read once sent
// (the reader recycles the slice); -1 when taken can count them after.
func (w *writer[T]) precount() int64 {
	if w.size == nil || !w.keeps {
		return -1
	}
	var n int64
	for i := range w.buf {
		n += int64(w.size(w.buf[i].val))
	}
	return n
}

// taken drops the first n gathered items, which an edge took; pre is
// their items, counted before they were sent, or -1.
func (w *writer[T]) taken(n int, pre int64) {
	if n == 0 {
		return
	}
	if pre >= 0 {
		// An edge that keeps slices takes all of one or nothing.
		w.out.add(pre)
		w.batches.Add(int64(n))
	} else {
		w.count(w.buf[:n])
	}
	if n == len(w.buf) {
		if w.keeps {
			w.buf = w.one.take(w.buf)
		} else {
			w.buf = w.buf[:0]
		}
		return
	}
	// Only a per-item edge takes part of what it is given.
	rest := copy(w.buf, w.buf[n:])
	clear(w.buf[rest:])
	w.buf = w.buf[:rest]
}

// flush sends everything gathered and publishes the count.
func (w *writer[T]) flush(ctx context.Context) error {
	_, err := w.send(ctx, nil)
	w.out.flush()
	return err
}

// tryFlush hands over what it can without waiting and reports whether
// something is left.
func (w *writer[T]) tryFlush() (pending bool) {
	defer w.out.flush()
	if w.fan != nil {
		committed, pending := w.fan.trySend(w.buf)
		if committed {
			w.count(w.buf)
			clear(w.buf)
			w.buf = w.buf[:0]
		}
		return pending
	}
	if len(w.buf) == 0 {
		return false
	}
	w.taken(w.one.trySend(w.buf), w.precount())
	return len(w.buf) > 0
}

// pending reports whether items wait to be handed over.
func (w *writer[T]) pending() bool {
	return len(w.buf) > 0 || (w.fan != nil && w.fan.owes())
}

// close flushes and gives up the writer's share of its edges; the last
// writer of an edge closes it, which tells its reader the input ended.
// close is called only when the producer finished cleanly.
func (w *writer[T]) close(ctx context.Context) error {
	if err := w.flush(ctx); err != nil {
		return err
	}
	if w.pending() {
		// A broadcast's branch was still owed items when the run stopped:
		// the edges must not end as if the input had.
		return context.Cause(ctx)
	}
	if w.fan != nil {
		for _, e := range w.fan.edges {
			e.release()
		}
	} else {
		w.one.release()
	}
	w.one, w.fan = nil, nil
	return nil
}

// A fanOut hands a writer's items to several edges: to every edge of a
// broadcast stream, each edge getting its own copy, or, for a Route, to
// the one edge of each item's branch. Items are committed to their edges
// at once, and each edge is owed its items until it took them: an item is
// handed to every edge it is for or, if the call that sends it ends
// first, to none.
type fanOut[T any] struct {
	edges []edge[T]
	owed  [][]envelope[T] // per edge: committed items it has not taken yet
	// pick, when not nil, routes instead (a Route's router): each item is
	// committed to the one edge pick names, with no part added.
	pick func(T) int
}

func newFanOut[T any](edges []edge[T]) *fanOut[T] {
	f := &fanOut[T]{edges: edges, owed: make([][]envelope[T], len(edges))}
	for i, e := range edges {
		f.owed[i] = e.take(nil)
	}
	return f
}

func (f *fanOut[T]) owes() bool {
	for _, o := range f.owed {
		if len(o) > 0 {
			return true
		}
	}
	return false
}

// send hands over what earlier calls left owed, then commits items and
// hands them over. Until everything owed was taken it commits nothing, so
// that a call that ends early leaves its items untaken. Once committed,
// items are the stream's, and send reports no error: when call ends, or
// the run stops, while an edge is still full, the rest is handed over by a
// later send or flush, or the run's end reports the items' trackers.
func (f *fanOut[T]) send(ctx, call context.Context, items []envelope[T]) (committed bool, err error) {
	if err := f.drain(ctx, call); err != nil {
		return false, err
	}
	if len(items) == 0 {
		return false, nil
	}
	f.commit(items)
	_ = f.drain(ctx, call)
	return true, nil
}

// trySend is send without waiting; pending reports whether something is
// left, of items or of what was owed.
func (f *fanOut[T]) trySend(items []envelope[T]) (committed, pending bool) {
	if len(items) > 0 && !f.owes() {
		f.commit(items)
		committed = true
	}
	for i, e := range f.edges {
		if len(f.owed[i]) > 0 {
			f.took(i, e.trySend(f.owed[i]))
		}
	}
	return committed, f.owes() || (!committed && len(items) > 0)
}

// commit makes every edge owed a copy of items, or, when routing, the
// edge of each item's branch owed that item. A broadcast tracked item now
// has a part on every branch, each of which completes on its own.
func (f *fanOut[T]) commit(items []envelope[T]) {
	if f.pick != nil {
		for _, it := range items {
			i := f.pick(it.val)
			f.owed[i] = append(f.owed[i], it)
		}
		return
	}
	for _, it := range items {
		if it.tr != nil {
			it.tr.add(len(f.edges) - 1)
		}
	}
	for i := range f.edges {
		f.owed[i] = append(f.owed[i], items...)
	}
}

func (f *fanOut[T]) drain(ctx, call context.Context) error {
	for i, e := range f.edges {
		o := f.owed[i]
		if len(o) == 0 {
			continue
		}
		n := e.trySend(o)
		if n < len(o) {
			m, err := e.send(ctx, call, o[n:])
			n += m
			if err != nil {
				f.took(i, n)
				return err
			}
		}
		f.took(i, n)
	}
	return nil
}

// took drops the first n items owed to edge i.
func (f *fanOut[T]) took(i, n int) {
	o := f.owed[i]
	switch {
	case n == 0:
	case n == len(o):
		f.owed[i] = f.edges[i].take(o)
	default:
		rest := copy(o, o[n:])
		clear(o[rest:])
		f.owed[i] = o[:rest]
	}
}
