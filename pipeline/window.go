package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
)

// A WindowSpec says how [Aggregate] cuts a key's items into windows:
// [CountWindow], [TimeWindow] or [SlidingWindow].
type WindowSpec struct {
	count      int
	size, step time.Duration
}

// CountWindow is a tumbling window of n items of a key: every n items of
// the key make one window.
func CountWindow(n int) WindowSpec { return WindowSpec{count: n} }

// TimeWindow is a tumbling window of d on the pipeline's clock: an item
// that arrives at t falls in the window [t.Truncate(d), that + d).
func TimeWindow(d time.Duration) WindowSpec { return WindowSpec{size: d, step: d} }

// SlidingWindow is a window of size that starts every step on the
// pipeline's clock: an item falls in every window whose span holds its
// arrival, size/step of them when step divides size.
func SlidingWindow(size, step time.Duration) WindowSpec { return WindowSpec{size: size, step: step} }

func (w WindowSpec) validate() error {
	switch {
	case w.count < 0:
		return fmt.Errorf("CountWindow(%d): must be at least 1", w.count)
	case w.count > 0:
		return nil
	case w.size <= 0 || w.step <= 0:
		return fmt.Errorf("window size %s and step %s: both must be positive", w.size, w.step)
	case w.step > w.size:
		return fmt.Errorf("SlidingWindow(%s, %s): the step must not be longer than the size, or items would fall in no window", w.size, w.step)
	}
	return nil
}

// A Window is one window's aggregate, as [Aggregate] hands it on.
type Window[K comparable, A any] struct {
	Key K
	// Start and End bound a time window, [Start, End) on the pipeline's
	// clock; zero for a count window.
	Start, End time.Time
	// Count is how many items the window holds.
	Count int
	// Value is the items reduced by add, from init().
	Value A
	// Partial says the window was handed on before it was complete: the
	// input ended first.
	Partial bool
}

// Aggregate adds a node that groups the items of in by key(item) into
// windows (spec), reduces each window's items with add, starting from
// init(), and hands on one [Window] per window: when it is complete (a
// count window holds its n items; a time window's end passed on the
// pipeline's clock) and, marked Partial, when the input ends. Windows are
// handed on in the order they complete; windows of one key in the order of
// their start. A tracked item completes when every window it is in does.
//
// add must not keep the item; it runs on one goroutine. A panic in init,
// key or add fails the node. For one window of everything, return a
// constant key.
func Aggregate[T any, K comparable, A any](b *Builder, name string, in Stream[T], key func(T) K, spec WindowSpec, init func() A, add func(A, T) A, opts ...NodeOption) Stream[Window[K, A]] {
	s := b.add(name, KindAggregate, opts, in.s)
	s.validate = func() []error {
		errs := parallelRefused(s)
		if key == nil || init == nil || add == nil {
			errs = append(errs, fmt.Errorf("Aggregate: key, init and add must not be nil"))
		}
		if err := spec.validate(); err != nil {
			errs = append(errs, err)
		}
		return errs
	}
	s.newEdge = edgeOf[T]
	s.newRunner = func(nr *nodeRun) runner {
		n := nr.spec
		r := newReader(nr.rs.edges[n.id].(edge[T]), &n.stats.in)
		a := &aggregator[T, K, A]{nr: nr, in: r, w: newWriter(outEdges[Window[K, A]](nr), &n.stats.out),
			key: key, spec: spec, init: init, add: add, clock: nr.rs.p.cfg.clock, wins: map[windowID[K]]*openWindow[T, K, A]{}, seq: map[K]int64{}}
		r.idle = a.w.flush
		return a
	}
	return Stream[Window[K, A]]{b.output(s)}
}

type windowID[K comparable] struct {
	key   K
	start int64 // Unix ns of a time window's start; a count window's sequence
}

type openWindow[T any, K comparable, A any] struct {
	win   Window[K, A]
	items []envelope[T]
}

type aggregator[T any, K comparable, A any] struct {
	nr    *nodeRun
	in    *reader[T]
	w     *writer[Window[K, A]]
	key   func(T) K
	spec  WindowSpec
	init  func() A
	add   func(A, T) A
	clock clockwork.Clock

	wins    map[windowID[K]]*openWindow[T, K, A]
	order   []windowID[K] // open windows, in the order they opened
	seq     map[K]int64   // a count window's sequence, by key
	took    bool
	emitted int64
}

func (a *aggregator[T, K, A]) open(context.Context) error       { return nil }
func (a *aggregator[T, K, A]) close(context.Context) error      { return nil }
func (a *aggregator[T, K, A]) consumed() bool                   { return a.took }
func (a *aggregator[T, K, A]) progress() int64                  { return a.emitted }
func (a *aggregator[T, K, A]) restarting()                      {}
func (a *aggregator[T, K, A]) reopens() bool                    { return false }
func (a *aggregator[T, K, A]) finish(ctx context.Context) error { return a.w.close(ctx) }

// body adds each item to its windows and hands on the windows that
// complete; at the end of input it hands on the open ones, Partial.
func (a *aggregator[T, K, A]) body(ctx context.Context) (err error) {
	defer a.in.n.flush()
	defer a.w.out.flush()
	defer recovered(&err)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var expired <-chan time.Time
		if timer != nil {
			expired = timer.Chan()
		}
		env, ok, timedOut, err := a.in.nextOr(ctx, expired)
		switch {
		case err != nil:
			return err
		case !ok && !timedOut:
			return a.flush(ctx, time.Time{}, true)
		}
		if !timedOut {
			a.took = true
			a.place(env)
		}
		if err := a.flush(ctx, a.clock.Now(), false); err != nil {
			return err
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if end, ok := a.nextEnd(); ok {
			timer = a.clock.NewTimer(max(end.Sub(a.clock.Now()), 0))
		}
	}
}

// place adds env to every window its item falls in, opening them as need
// be. A count window that fills is complete at once.
func (a *aggregator[T, K, A]) place(env envelope[T]) {
	k := a.key(env.val)
	var ids []windowID[K]
	var starts []time.Time
	if a.spec.count > 0 {
		ids = append(ids, windowID[K]{key: k, start: a.seq[k]})
		starts = append(starts, time.Time{})
	} else {
		now := a.clock.Now()
		// Every window [start, start+size) with start on a step boundary
		// that holds now: the last start is now truncated to the step.
		last := now.Truncate(a.spec.step)
		for st := last; now.Before(st.Add(a.spec.size)); st = st.Add(-a.spec.step) {
			ids = append(ids, windowID[K]{key: k, start: st.UnixNano()})
			starts = append(starts, st)
		}
		slices.Reverse(ids)
		slices.Reverse(starts)
	}
	for i, id := range ids {
		w := a.wins[id]
		if w == nil {
			w = &openWindow[T, K, A]{win: Window[K, A]{Key: k, Value: a.init()}}
			if a.spec.count == 0 {
				w.win.Start = starts[i]
				w.win.End = w.win.Start.Add(a.spec.size)
			}
			a.wins[id] = w
			a.order = append(a.order, id)
		}
		w.win.Value = a.add(w.win.Value, env.val)
		w.win.Count++
		if env.tr != nil && i > 0 {
			// One more window waits on the item.
			env.tr.add(1)
		}
		w.items = append(w.items, env)
	}
	if a.spec.count > 0 {
		if w := a.wins[ids[0]]; w.win.Count >= a.spec.count {
			a.seq[k]++
		}
	}
}

// complete reports whether window id is complete at now.
func (a *aggregator[T, K, A]) complete(id windowID[K], w *openWindow[T, K, A], now time.Time) bool {
	if a.spec.count > 0 {
		return w.win.Count >= a.spec.count
	}
	return !now.Before(w.win.End)
}

// flush hands on the windows complete at now, in the order they opened;
// with all, every open window, as Partial when it is not complete.
func (a *aggregator[T, K, A]) flush(ctx context.Context, now time.Time, all bool) error {
	kept := a.order[:0]
	var err error
	for i, id := range a.order {
		w := a.wins[id]
		done := all || a.complete(id, w, now)
		if !done || err != nil {
			kept = append(kept, id)
			continue
		}
		if all && !a.complete(id, w, a.clock.Now()) {
			w.win.Partial = true
		}
		delete(a.wins, id)
		tr := group(w.items)
		if tr != nil {
			tr.window = true
		}
		a.emitted++
		if err = a.w.push(ctx, envelope[Window[K, A]]{val: w.win, tr: tr}); err != nil {
			// The windows not yet handed on stay open; this one is gone
			// with the run, which is stopping.
			kept = append(kept, a.order[i+1:]...)
			break
		}
	}
	a.order = kept
	return err
}

// nextEnd returns the earliest end of an open time window.
func (a *aggregator[T, K, A]) nextEnd() (time.Time, bool) {
	if a.spec.count > 0 || len(a.order) == 0 {
		return time.Time{}, false
	}
	first := a.wins[a.order[0]].win.End
	for _, id := range a.order[1:] {
		if e := a.wins[id].win.End; e.Before(first) {
			first = e
		}
	}
	return first, true
}
