package pipeline

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"
	"unsafe"

	"github.com/jonboulle/clockwork"
)

// Batch adds a node that gathers the items of in into slices of size
// items. A slice is handed over when it is full, when linger has passed on
// the pipeline's clock since its first item (linger 0 waits for a full
// slice), and when the input ends. A tracked item completes when the batch
// it is in does.
func Batch[T any](b *Builder, name string, in Stream[T], size int, linger time.Duration, opts ...NodeOption) Stream[[]T] {
	s := b.add(name, KindBatch, opts, in.s)
	if inLen := sliceLen[T](); countIn(s, inLen) {
		// A batch of batches: its items are the inner batches' items.
		countOut(s, func(v []T) int {
			n := 0
			for _, x := range v {
				n += inLen(x)
			}
			return n
		})
	} else {
		countOut(s, sliceLen[[]T]())
	}
	s.validate = func() []error {
		var errs []error
		if size < 1 {
			errs = append(errs, fmt.Errorf("Batch size %d: must be at least 1", size))
		}
		if linger < 0 {
			errs = append(errs, fmt.Errorf("Batch linger %s: must not be negative", linger))
		}
		return errs
	}
	s.newEdge = edgeOf[T]
	s.newRunner = func(nr *nodeRun) runner {
		n := nr.spec
		r := newReader(nr.rs.edges[n.id].(edge[T]), n)
		br := &batcher[T]{nr: nr, in: r, w: newWriter(outEdges[[]T](nr), n), size: size, linger: linger, g: newGathering[T](size)}
		r.idle = br.w.flush
		return br
	}
	return Stream[[]T]{b.output(s)}
}

type batcher[T any] struct {
	nr      *nodeRun
	in      *reader[T]
	w       *writer[[]T]
	size    int
	linger  time.Duration
	g       gathering[T]
	took    bool
	batches int64
}

func (b *batcher[T]) open(context.Context) error       { return nil }
func (b *batcher[T]) close(context.Context) error      { return nil }
func (b *batcher[T]) consumed() bool                   { return b.took }
func (b *batcher[T]) progress() int64                  { return b.batches }
func (b *batcher[T]) restarting()                      {}
func (b *batcher[T]) reopens() bool                    { return false }
func (b *batcher[T]) finish(ctx context.Context) error { return b.w.close(ctx) }

func (b *batcher[T]) body(ctx context.Context) error {
	defer b.in.n.flush()
	defer b.w.out.flush()
	return gather(ctx, b.in, b.nr.rs.p.cfg.clock, b.linger, b.size, &b.g, &b.took, b.emit)
}

// emit hands on the slice gathered: the values go on in the slice they
// were gathered into, with no copy, and the trackers of the items are the
// batch's tracker's parents.
func (b *batcher[T]) emit(ctx context.Context) error {
	if len(b.g.vals) == 0 {
		return nil
	}
	vals, trs := b.g.take()
	b.batches++
	return b.w.push(ctx, envelope[[]T]{val: vals, tr: groupOf(trs)})
}

// A gathering is the slice a Batch or a MapBatch node gathers: the items'
// values, in order, in the slice that is handed on (Batch) or to the
// user's function (MapBatch), and their trackers, nil while none of them
// is tracked, so that untracked items cost one copy of their value each.
//
// A new slice is made with the most items a slice has held so far (the
// node's size once a slice was full), and grows by doubling, up to the
// size, while it holds fewer: a node whose slices are full makes each
// one once, at its size, and one whose slices stay small (a linger's,
// a drain's) makes small ones.
type gathering[T any] struct {
	vals []T
	trs  []*tracker // nil, or one per value
	// size is the node's size: a slice never holds more.
	size int
	// capacity is what a new vals is made with: the most items a slice
	// has held, up to size.
	capacity int
	// pointerFree: a T holds no pointer, so a slice kept for more
	// items need not be cleared, which only lets the collector free
	// what its old values point to.
	pointerFree bool
}

func newGathering[T any](size int) gathering[T] {
	return gathering[T]{size: size, pointerFree: pointerFree(reflect.TypeFor[T]())}
}

// pointerFree reports whether a value of type t holds no pointer.
func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return t.Len() == 0 || pointerFree(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// clear clears vals, when its values may point to something.
func (g *gathering[T]) clear(vals []T) {
	if !g.pointerFree {
		clear(vals)
	}
}

// add appends the items of run (len(g.vals)+len(run) ≤ g.size).
func (g *gathering[T]) add(run []envelope[T]) {
	n := len(g.vals)
	if need := n + len(run); need > cap(g.vals) {
		grown := make([]T, n, min(max(g.capacity, 2*cap(g.vals), need), max(g.size, need)))
		copy(grown, g.vals)
		g.vals = grown
	}
	g.vals = g.vals[:n+len(run)]
	dst := g.vals[n:]
	dst = dst[:len(run)]
	// trackers ORs the trackers' addresses: 0 when none is tracked, with
	// no branch per item. Eight at a time: the slicing of each eight
	// costs about what the copy of four does.
	var trackers uintptr
	i := 0
	for ; len(run)-i >= 8; i += 8 {
		d, r := dst[i:i+8:i+8], run[i:i+8:i+8]
		d[0], d[1], d[2], d[3] = r[0].val, r[1].val, r[2].val, r[3].val
		d[4], d[5], d[6], d[7] = r[4].val, r[5].val, r[6].val, r[7].val
		trackers |= uintptr(unsafe.Pointer(r[0].tr)) | uintptr(unsafe.Pointer(r[1].tr)) |
			uintptr(unsafe.Pointer(r[2].tr)) | uintptr(unsafe.Pointer(r[3].tr)) |
			uintptr(unsafe.Pointer(r[4].tr)) | uintptr(unsafe.Pointer(r[5].tr)) |
			uintptr(unsafe.Pointer(r[6].tr)) | uintptr(unsafe.Pointer(r[7].tr))
	}
	for ; i < len(run); i++ {
		dst[i] = run[i].val
		trackers |= uintptr(unsafe.Pointer(run[i].tr))
	}
	if trackers == 0 && g.trs == nil {
		return
	}
	if g.trs == nil {
		g.trs = make([]*tracker, n, cap(g.vals))
	}
	for i := range run {
		g.trs = append(g.trs, run[i].tr)
	}
}

// take returns what was gathered, which is no longer the gathering's,
// and starts a new slice. A few items in a large slice (a linger's
// flush after full slices) go in a slice of their own, and the large
// one is kept: what is handed on never holds more than twice its items.
func (g *gathering[T]) take() ([]T, []*tracker) {
	vals, trs := g.vals, g.trs
	g.trs = nil
	g.capacity = max(g.capacity, len(vals))
	if len(vals) < cap(vals)/2 {
		out := slices.Clone(vals)
		g.clear(vals)
		g.vals = vals[:0]
		return out, trs
	}
	g.vals = nil
	return vals[:len(vals):len(vals)], trs
}

// lend returns what was gathered for a call that gives it back: the
// next items are gathered into the same slice once reset is called.
func (g *gathering[T]) lend() ([]T, []*tracker) {
	vals, trs := g.vals, g.trs
	g.vals, g.trs = nil, nil
	g.capacity = max(g.capacity, len(vals))
	return vals, trs
}

// reset gathers again into vals, lent by lend and settled.
func (g *gathering[T]) reset(vals []T) {
	g.clear(vals)
	g.vals = vals[:0]
}

// gather reads in until it ends, adding its envelopes to g a run at a
// time (never past size) and calling flush when size are held, when
// linger has passed on clock since the first of them (0: never), and
// when the input ends. took is set once anything was read.
func gather[T any](ctx context.Context, in *reader[T], clock clockwork.Clock, linger time.Duration, size int, g *gathering[T], took *bool, flush func(context.Context) error) error {
	var timer clockwork.Timer
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
	}
	defer stopTimer()
	for {
		var expired <-chan time.Time
		if timer != nil {
			expired = timer.Chan()
		}
		run, ok, timedOut, err := in.nextRunOr(ctx, expired, size-len(g.vals))
		switch {
		case err != nil:
			return err
		case timedOut:
			timer = nil
			if err := flush(ctx); err != nil {
				return err
			}
			continue
		case !ok:
			return flush(ctx)
		}
		*took = true
		if len(g.vals) == 0 && linger > 0 {
			timer = clock.NewTimer(linger)
		}
		g.add(run)
		if len(g.vals) >= size {
			stopTimer()
			if err := flush(ctx); err != nil {
				return err
			}
		}
	}
}
