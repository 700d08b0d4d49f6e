package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/sluicehq/sluice/node"
)

// Transform adds a node that calls t on every item of in and returns the
// stream of its results.
func Transform[In, Out any](b *Builder, name string, in Stream[In], t node.Transform[In, Out], opts ...NodeOption) Stream[Out] {
	s := b.add(name, KindTransform, opts, in.s)
	s.setClock = clockSetterOf(t)
	passBatches[In, Out](s)
	nilErr := notNil(isNil(t), "transform is nil")
	s.validate = func() []error {
		errs := append(nilErr(), keyedCheck[In](s.cfg)...)
		switch f := s.cfg.fallback.(type) {
		case nil, func(context.Context, In, error) (Out, error):
		case error:
			errs = append(errs, f)
		default:
			var want func(context.Context, In, error) (Out, error)
			errs = append(errs, fmt.Errorf("Fallback: the node needs a %T, not a %T", want, f))
		}
		return errs
	}
	s.newEdge = edgeOf[In]
	s.newRunner = func(nr *nodeRun) runner {
		p := newProc(nr, t, t.Process, func(ctx context.Context, w *writer[Out], _ *tally, env envelope[In], r Out) error {
			env.tr.reshape()
			return w.push(ctx, envelope[Out]{val: r, tr: env.tr})
		})
		if f, ok := nr.spec.cfg.fallback.(func(context.Context, In, error) (Out, error)); ok {
			p.rescue = f
		}
		p.loop = func(ctx context.Context, w *writer[Out], _ *tally, items []envelope[In], j *int, tick *uint, g *gate) (error, error) {
			for ; *j < len(items); *j++ {
				if *tick++; *tick%stopEvery == 0 && ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				it := &items[*j]
				if g != nil && !g.enter() {
					return errRefused, nil
				}
				r, err := userCall(nr, ctx, t.Process, it.val)
				if err != nil {
					return err, nil
				}
				if g != nil {
					g.passed()
				}
				it.tr.reshape()
				if err := w.push(ctx, envelope[Out]{val: r, tr: it.tr}); err != nil {
					return nil, err
				}
			}
			return nil, nil
		}
		return p
	}
	return Stream[Out]{b.output(s)}
}

// Sink adds a node that writes every item of in with s. An item is
// delivered when Write returns nil; a sink that implements [node.Flusher]
// is flushed after its last item when the run succeeds, and before a node
// restart closes it to open it again (a sink with an Open).
func Sink[T any](b *Builder, name string, in Stream[T], s node.Sink[T], opts ...NodeOption) {
	n := b.add(name, KindSink, opts, in.s)
	n.setClock = clockSetterOf(s)
	takeBatches[T](n)
	if _, ok := s.(node.Flusher); ok && !isNil(s) {
		n.flushes = true
	}
	n.validate = withKeyed[T](n, notNil(isNil(s), "sink is nil"))
	n.newEdge = edgeOf[T]
	n.newRunner = func(nr *nodeRun) runner {
		write := func(ctx context.Context, v T) (struct{}, error) { return struct{}{}, s.Write(ctx, v) }
		size, batches := sizeOf[T](nr.spec.inSize), &nr.spec.stats.outBatches
		p := newProc(nr, s, write, func(_ context.Context, _ *writer[struct{}], done *tally, env envelope[T], _ struct{}) error {
			if size == nil {
				done.add(1)
			} else {
				done.add(int64(size(env.val)))
				batches.Add(1)
			}
			if env.tr != nil {
				env.tr.finish(node.Delivered)
			}
			return nil
		})
		p.loop = func(ctx context.Context, _ *writer[struct{}], done *tally, items []envelope[T], j *int, tick *uint, g *gate) (error, error) {
			for ; *j < len(items); *j++ {
				if *tick++; *tick%stopEvery == 0 && ctx.Err() != nil {
					return nil, context.Cause(ctx)
				}
				it := &items[*j]
				if g != nil && !g.enter() {
					return errRefused, nil
				}
				if err := userWrite(nr, ctx, s, it.val); err != nil {
					return err, nil
				}
				if g != nil {
					g.passed()
				}
				if size == nil {
					done.add(1)
				} else {
					done.add(int64(size(it.val)))
					batches.Add(1)
				}
				if it.tr != nil {
					it.tr.finish(node.Delivered)
				}
			}
			return nil, nil
		}
		return p
	}
}

// Filter adds a node that keeps the items of in for which keep returns
// true. A dropped item is Filtered. keep must be safe for concurrent use
// under Parallel.
func Filter[T any](b *Builder, name string, in Stream[T], keep func(T) bool, opts ...NodeOption) Stream[T] {
	s := b.add(name, KindFilter, opts, in.s)
	passBatches[T, T](s)
	s.validate = withKeyed[T](s, notNil(keep == nil, "filter function is nil"))
	s.newEdge = edgeOf[T]
	s.newRunner = func(nr *nodeRun) runner {
		st, size := nr.spec.stats, sizeOf[T](nr.spec.inSize)
		call := func(_ context.Context, v T) (bool, error) { return keep(v), nil }
		return newProc(nr, nil, call, func(ctx context.Context, w *writer[T], _ *tally, env envelope[T], kept bool) error {
			if !kept {
				st.filtered.Add(count(size, env.val))
				if env.tr != nil {
					env.tr.finish(node.Filtered)
				}
				return nil
			}
			return w.push(ctx, env)
		})
	}
	return Stream[T]{b.output(s)}
}

// FlatMap adds a node that turns each item of in into any number of items,
// handed downstream in order. An item turned into none is Filtered; a
// tracked item completes when all its children do. Layer 1 retries the
// whole call: f should not have effects a retry would repeat.
func FlatMap[In, Out any](b *Builder, name string, in Stream[In], f func(context.Context, In) ([]Out, error), opts ...NodeOption) Stream[Out] {
	s := b.add(name, KindFlatMap, opts, in.s)
	takeBatches[In](s)
	s.validate = withKeyed[In](s, notNil(f == nil, "flat map function is nil"))
	s.newEdge = edgeOf[In]
	s.newRunner = func(nr *nodeRun) runner { return newProc(nr, nil, f, spread[In, Out](nr.spec, false)) }
	return Stream[Out]{b.output(s)}
}

// Unbatch adds a node that hands over the items of each slice of in one by
// one. Tracked items of a Batch handed straight to it each take back their
// own tracking, so that each reports its own fate; after a Map,
// Transform, MapBatch or FlatMap of the batch, any of which may have
// reordered it, they share the batch's (give the items to MapBatch to
// call a function on a batch and keep each item's own fate). Such a node
// in another branch of a broadcast of the batch may make them share it
// too.
func Unbatch[T any](b *Builder, name string, in Stream[[]T], opts ...NodeOption) Stream[T] {
	s := b.add(name, KindUnbatch, opts, in.s)
	takeBatches[[]T](s)
	s.newEdge = edgeOf[[]T]
	s.newRunner = func(nr *nodeRun) runner {
		call := func(_ context.Context, v []T) ([]T, error) { return v, nil }
		return newProc(nr, nil, call, spread[[]T, T](nr.spec, true))
	}
	return Stream[T]{b.output(s)}
}

// spread delivers a slice result item by item. With ungroup (Unbatch), a
// batch of as many items as the slice takes them to be its items, in
// order: each takes back its own tracker. A FlatMap's results may be
// reordered or new: they share the batch's tracker.
func spread[In, Out any](n *spec, ungroup bool) deliverFunc[In, []Out, Out] {
	st, size := n.stats, sizeOf[In](n.inSize)
	return func(ctx context.Context, w *writer[Out], _ *tally, env envelope[In], r []Out) error {
		if len(r) == 0 {
			st.filtered.Add(count(size, env.val))
			if env.tr != nil {
				env.tr.finish(node.Filtered)
			}
			return nil
		}
		if !ungroup {
			// A FlatMap's results may be reordered or new: if they are
			// slices, a later Unbatch must not take them for the batch's
			// items in order.
			env.tr.reshape()
		}
		if own := env.tr.ungroup(len(r)); ungroup && own != nil {
			// A batch handed on item by item: each item takes back its
			// own tracker, so that its done reports its own fate. Every
			// item holds its part before the batch lets go of them all,
			// and the batch lets go before the first push: a push that
			// waits, then a run that stops, leaves each item to its own
			// fate, Delivered for those written, not the batch's
			// unfinished one for all.
			for _, tr := range own {
				if tr != nil {
					tr.add(1)
				}
			}
			env.tr.release()
			for i, v := range r {
				if err := w.push(ctx, envelope[Out]{val: v, tr: own[i]}); err != nil {
					return err
				}
			}
			return nil
		}
		if env.tr == nil {
			_, err := w.pushVals(ctx, r)
			return err
		}
		if len(r) > 1 {
			env.tr.add(len(r) - 1)
		}
		for _, v := range r {
			if err := w.push(ctx, envelope[Out]{val: v, tr: env.tr}); err != nil {
				return err
			}
		}
		return nil
	}
}

// Merge adds a node that hands over the items of every stream of ins, in
// the order they arrive.
func Merge[T any](b *Builder, name string, ins ...Stream[T]) Stream[T] {
	streams := make([]*stream, len(ins))
	for i, in := range ins {
		streams[i] = in.s
	}
	s := b.add(name, KindMerge, nil, streams...)
	passBatches[T, T](s)
	s.validate = func() []error {
		if len(ins) == 0 {
			return []error{errors.New("merge has no input")}
		}
		for i, a := range streams {
			for _, b := range streams[:i] {
				if a != nil && a == b {
					return []error{fmt.Errorf("merge takes the output of %q twice: every item would arrive twice", a.producer.name)}
				}
			}
		}
		return nil
	}
	s.newEdge = edgeOf[T]
	s.newRunner = func(nr *nodeRun) runner {
		call := func(_ context.Context, v T) (T, error) { return v, nil }
		return newProc(nr, nil, call, func(ctx context.Context, w *writer[T], _ *tally, env envelope[T], _ T) error {
			return w.push(ctx, env)
		})
	}
	return Stream[T]{b.output(s)}
}

func edgeOf[T any](buffer, batch int) any { return newEdge[T](buffer, batch) }

// isNil reports whether v is nil, or a nil func, pointer, map, channel or
// slice in an interface, such as a nil node.TransformFunc: calling a
// method of one would fail at run time.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func notNil(nilValue bool, msg string) func() []error {
	return func() []error {
		if nilValue {
			return []error{errors.New(msg)}
		}
		return nil
	}
}

// withKeyed adds the checks of the node's Keyed option to validate; In is
// the node's input type.
func withKeyed[In any](s *spec, validate func() []error) func() []error {
	return func() []error { return append(validate(), keyedCheck[In](s.cfg)...) }
}
