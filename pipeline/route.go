package pipeline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// Map adds a transform that calls f on each item of in: Transform for a
// plain function, with the types inferred from f.
func Map[In, Out any](b *Builder, name string, in Stream[In], f func(context.Context, In) (Out, error), opts ...NodeOption) Stream[Out] {
	var t node.Transform[In, Out]
	if f != nil {
		t = node.TransformFunc[In, Out](f)
	}
	return Transform(b, name, in, t, opts...)
}

// ForEach adds a sink that writes each item of in with f: Sink for a
// plain function, with the type inferred from f. (It is not named
// SinkFunc, which is [node.SinkFunc], the adapter type it wraps f in.)
func ForEach[T any](b *Builder, name string, in Stream[T], f func(context.Context, T) error, opts ...NodeOption) {
	var s node.Sink[T]
	if f != nil {
		s = node.SinkFunc[T](f)
	}
	Sink(b, name, in, s, opts...)
}

// routed is an item on its way from a Route's router to its branch.
type routed[T any] struct {
	branch int
	val    T
}

// branchOf is the branch rv goes to: the index of its edge among the
// router's output edges.
func branchOf[T any](rv routed[T]) int { return rv.branch }

// ErrNoBranch is matched by the error of an item whose Route pick returned
// a branch that does not exist. It is permanent: the item goes to the
// router's failure action.
var ErrNoBranch = fmt.Errorf("pipeline: no such branch")

// Route adds a node that sends each item of in to exactly one of n
// branches, the one pick returns (0 to n-1), and returns the branches'
// streams. pick is called once per item; a pick out of range fails the item
// with an error matching [ErrNoBranch], which the router's failure action
// handles (with OnItemFailure = DeadLetter, the item is dead-lettered by
// the router). pick must be safe for concurrent use under Parallel.
//
// A tracked item's done reports the outcome it has on its branch, as soon
// as it has it, whatever the other branches do; an item that its branch
// has not taken when the run stops ends Failed. Items keep their order
// within a branch (without Parallel on the router). The router hands each
// item to its own branch alone; a branch that stops reading stops the
// router once the router has an item for it, and so the others.
//
// The router is a node named name; branch i is a node named
// "name[i]", of kind branch, whose In and Out count the items routed to
// it. opts apply to the router.
func Route[T any](b *Builder, name string, in Stream[T], n int, pick func(T) int, opts ...NodeOption) []Stream[T] {
	r := b.add(name, KindRoute, opts, in.s)
	var size func(T) int
	var routedSize func(rv routed[T]) int
	if countIn(r, sliceLen[T]()) {
		size = r.inSize.(func(T) int)
		routedSize = func(rv routed[T]) int { return size(rv.val) }
		countOut(r, routedSize)
	}
	r.validate = func() []error {
		var errs []error
		if pick == nil {
			errs = append(errs, fmt.Errorf("pick function is nil"))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("Route: %d branches; there must be at least 1", n))
		}
		return errs
	}
	r.newEdge = edgeOf[T]
	r.newRunner = func(nr *nodeRun) runner {
		call := func(_ context.Context, v T) (routed[T], error) {
			i := pick(v)
			if i < 0 || i >= n {
				return routed[T]{}, resilience.MarkPermanent(fmt.Errorf("%w: pick returned %d, and the branches are 0 to %d", ErrNoBranch, i, n-1))
			}
			return routed[T]{branch: i, val: v}, nil
		}
		p := newProc(nr, nil, call, func(ctx context.Context, w *writer[routed[T]], _ *tally, env envelope[T], rv routed[T]) error {
			return w.push(ctx, envelope[routed[T]]{val: rv, tr: env.tr})
		})
		for _, w := range p.writers {
			if w.fan != nil {
				// Each item to its own branch's edge alone: the branches
				// are the output's consumers, in order.
				w.fan.pick = branchOf[T]
			}
		}
		return p
	}
	out := b.output(r)
	streams := make([]Stream[T], max(n, 0))
	for i := range streams {
		br := b.add(name+"["+strconv.Itoa(i)+"]", KindBranch, nil, out)
		if countIn(br, routedSize) {
			countOut(br, size)
		}
		br.newEdge = edgeOf[routed[T]]
		br.newRunner = func(nr *nodeRun) runner {
			call := func(_ context.Context, rv routed[T]) (routed[T], error) { return rv, nil }
			return newProc(nr, nil, call, func(ctx context.Context, w *writer[T], _ *tally, env envelope[routed[T]], rv routed[T]) error {
				return w.push(ctx, envelope[T]{val: rv.val, tr: env.tr})
			})
		}
		streams[i] = Stream[T]{b.output(br)}
	}
	return streams
}

// Split adds a node that sends each item of in to yes when keep returns
// true and to no otherwise: a Route with two branches, "name[0]" (yes) and
// "name[1]" (no).
func Split[T any](b *Builder, name string, in Stream[T], keep func(T) bool, opts ...NodeOption) (yes, no Stream[T]) {
	var pick func(T) int
	if keep != nil {
		pick = func(v T) int {
			if keep(v) {
				return 0
			}
			return 1
		}
	}
	s := Route(b, name, in, 2, pick, opts...)
	return s[0], s[1]
}
