package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/resilience"
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
	// Key is the key whose items the window holds.
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
	takeBatches[T](s)
	s.validate = func() []error {
		var errs []error
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
		r := newReader(nr.rs.edges[n.id].(edge[T]), n)
		a := &aggregator[T, K, A]{nr: nr, in: r, w: newWriter(outEdges[Window[K, A]](nr), n),
			key: key, spec: spec, init: init, add: add, clock: nr.rs.p.cfg.clock, wins: map[windowID[K]]*openWindow[T, K, A]{}, seq: map[K]int64{}}
		r.idle = a.w.flush
		return a
	}
	return Stream[Window[K, A]]{b.output(s)}
}

type windowID[K comparable] struct {
	key   K
	start int64 // Unix ns of a time window's start; a count window's serial
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
	seq     map[K]int64   // the serial of a key's open count window
	serial  int64         // the last count window's serial
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
// complete; at the end of input it hands on the open ones, Partial. A
// panic in key, init or add fails the node for good: the item it was
// placing is then in no window, and a restart would lose it.
func (a *aggregator[T, K, A]) body(ctx context.Context) (err error) {
	defer a.in.n.flush()
	defer a.w.out.flush()
	defer func() {
		if err != nil {
			var pe *resilience.PanicError
			if errors.As(err, &pe) {
				err = &notRestartable{err}
			}
		}
	}()
	defer recovered(&err)
	var timer clockwork.Timer
	arm := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if end, ok := a.nextEnd(); ok {
			// At the end itself: a duration from a reading would fire late
			// by however far the clock moved before the timer was armed.
			timer = newTimerAt(a.clock, end)
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm() // windows kept open across a restart close on time too
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
			return a.flushAll(ctx)
		}
		if !timedOut {
			a.took = true
			if id, full := a.place(env); full {
				if err := a.hand(ctx, id, false); err != nil {
					return err
				}
			}
		}
		if err := a.flushDue(ctx, a.clock.Now()); err != nil {
			return err
		}
		arm()
	}
}

// place adds env to every window its item falls in, opening them as need
// be. For a count window, it reports the window and whether it is full.
func (a *aggregator[T, K, A]) place(env envelope[T]) (windowID[K], bool) {
	k := a.key(env.val)
	var ids []windowID[K]
	var starts []time.Time
	if a.spec.count > 0 {
		serial, ok := a.seq[k]
		if !ok {
			a.serial++
			serial = a.serial
			a.seq[k] = serial
		}
		ids = append(ids, windowID[K]{key: k, start: serial})
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
			if a.spec.count > 0 {
				a.order = append(a.order, id)
			} else {
				// Kept in the order of End (ties in the order they
				// opened): a sliding window of one key can open after a
				// later-ending one of another.
				at, _ := slices.BinarySearchFunc(a.order, w.win.End, func(o windowID[K], end time.Time) int {
					if a.wins[o].win.End.After(end) {
						return 1
					}
					return -1
				})
				a.order = slices.Insert(a.order, at, id)
			}
		}
		w.win.Value = a.add(w.win.Value, env.val)
		w.win.Count++
		if env.tr != nil && i > 0 {
			// One more window waits on the item.
			env.tr.add(1)
		}
		w.items = append(w.items, env)
	}
	if a.spec.count > 0 && a.wins[ids[0]].win.Count >= a.spec.count {
		// The key's next item opens a new window; the key is forgotten
		// until then, so that keys seen once do not pile up.
		delete(a.seq, k)
		return ids[0], true
	}
	return windowID[K]{}, false
}

// hand hands window id on and forgets it.
func (a *aggregator[T, K, A]) hand(ctx context.Context, id windowID[K], partial bool) error {
	w := a.wins[id]
	delete(a.wins, id)
	switch {
	case len(a.order) > 0 && a.order[0] == id:
		a.order = a.order[1:]
	case len(a.order) > 2*len(a.wins)+16:
		// A count window completes anywhere in the order: the order
		// skips the windows handed on, and is compacted now and then.
		a.order = slices.DeleteFunc(a.order, func(o windowID[K]) bool { return a.wins[o] == nil })
	}
	w.win.Partial = partial
	tr := group(w.items)
	if tr != nil {
		tr.window = true
	}
	a.emitted++
	return a.w.push(ctx, envelope[Window[K, A]]{val: w.win, tr: tr})
}

// flushDue hands on the time windows whose end passed by now: they are at
// the front of the order, which time windows keep by End.
func (a *aggregator[T, K, A]) flushDue(ctx context.Context, now time.Time) error {
	if a.spec.count > 0 {
		return nil
	}
	for len(a.order) > 0 {
		id := a.order[0]
		if now.Before(a.wins[id].win.End) {
			return nil
		}
		if err := a.hand(ctx, id, false); err != nil {
			return err
		}
	}
	return nil
}

// flushAll hands on every open window at the end of input, Partial unless
// it is complete.
func (a *aggregator[T, K, A]) flushAll(ctx context.Context) error {
	now := a.clock.Now()
	for len(a.order) > 0 {
		id := a.order[0]
		w := a.wins[id]
		if w == nil { // handed on already
			a.order = a.order[1:]
			continue
		}
		complete := (a.spec.count > 0 && w.win.Count >= a.spec.count) || (a.spec.count == 0 && !now.Before(w.win.End))
		if err := a.hand(ctx, id, !complete); err != nil {
			return err
		}
	}
	return nil
}

// nextEnd returns the earliest end of an open time window: the first's.
func (a *aggregator[T, K, A]) nextEnd() (time.Time, bool) {
	if a.spec.count > 0 || len(a.order) == 0 {
		return time.Time{}, false
	}
	return a.wins[a.order[0]].win.End, true
}
