package pipeline

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// either is an item of one of a Join's two inputs.
type either[L, R any] struct {
	left bool
	l    L
	r    R
}

// Join adds a node that joins two streams by key within a time window: a
// left and a right item with equal keys that arrive at the node less than
// within apart, on the pipeline's clock, are handed on as join(l, r) (an
// inner join: an item joins every partner in its window, in the order the
// partners arrived). An item that found no partner within its window is
// dropped on purpose: a tracked one ends Filtered; one that joined
// completes when its joins do. At the end of input, items still waiting
// are dropped the same way. With [JoinEventTime], items join on their
// own times instead, and wait until the watermark passes them; late ones
// go to the dead letter, or with [JoinLate] to two streams.
//
// The join reads both inputs through two nodes, "name/left" and
// "name/right", that tag each item with its side; the node called name
// holds the items of the window (kind join). With JoinLate, its pairs
// come out of a branch node "name[joins]". key functions run once per
// item; join once per pair, on one goroutine.
func Join[L, R any, K comparable, Out any](b *Builder, name string, left Stream[L], right Stream[R], keyL func(L) K, keyR func(R) K, within time.Duration, join func(L, R) Out, opts ...NodeOption) Stream[Out] {
	var tagL func(context.Context, L) (either[L, R], error)
	var tagR func(context.Context, R) (either[L, R], error)
	if keyL != nil && keyR != nil {
		tagL = func(_ context.Context, v L) (either[L, R], error) { return either[L, R]{left: true, l: v}, nil }
		tagR = func(_ context.Context, v R) (either[L, R], error) { return either[L, R]{r: v}, nil }
	}
	tl, tr := Map(b, name+"/left", left, tagL), Map(b, name+"/right", right, tagR)
	tl.s.producer.tagging, tr.s.producer.tagging = true, true
	in := Merge(b, name+"/in", tl, tr)
	s := b.add(name, KindJoin, opts, in.s)
	s.validate = func() []error {
		var errs []error
		if keyL == nil || keyR == nil || join == nil {
			errs = append(errs, fmt.Errorf("Join: the key functions and join must not be nil"))
		}
		if within <= 0 {
			errs = append(errs, fmt.Errorf("Join window %s: must be positive", within))
		}
		return append(errs, checkJoinTime[L, R](s.cfg)...)
	}
	s.newEdge = edgeOf[either[L, R]]
	newJoiner := func(nr *nodeRun) *joiner[L, R, K, Out] {
		n := nr.spec
		j := &joiner[L, R, K, Out]{nr: nr, in: newReader(nr.rs.edges[n.id].(edge[either[L, R]]), n), keyL: keyL, keyR: keyR,
			join: join, within: within, clock: nr.rs.p.cfg.clock, lefts: map[K][]*waiting[L]{}, rights: map[K][]*waiting[R]{}}
		if jt := s.cfg.joinTime; jt != nil {
			j.et = &joinWatermark[L, R]{atL: jt.atL.(func(L) time.Time), atR: jt.atR.(func(R) time.Time),
				maxLateness: jt.maxLateness, idle: jt.idle}
		}
		return j
	}
	if late := s.cfg.joinLate; late != nil {
		return joinLateSplit(b, s, late, newJoiner)
	}
	s.newRunner = func(nr *nodeRun) runner {
		j := newJoiner(nr)
		w := newWriter(outEdges[Out](nr), nr.spec)
		j.out = w.push
		j.flushOut, j.in.idle = w.out.flush, w.flush
		j.closeOut = w.close
		return j
	}
	return Stream[Out]{b.output(s)}
}

// waiting is an item of one side that waits for partners.
type waiting[T any] struct {
	val     T
	tr      *tracker
	t       time.Time // its event time, with JoinEventTime
	expires time.Time
	joined  int
}

// queued is a waiting item in the order of expiry, ties in the order of
// arrival: on the clock every item waits the same time, so that is the
// order of arrival; on event time it is not.
type queued[L, R any, K comparable] struct {
	key     K
	expires time.Time
	seq     int64
	l       *waiting[L] // the item, on its side
	r       *waiting[R]
}

// expiries is a heap of waiting items, the first to expire on top.
type expiries[L, R any, K comparable] struct {
	q   []queued[L, R, K]
	seq int64
}

func (h *expiries[L, R, K]) Len() int { return len(h.q) }
func (h *expiries[L, R, K]) Less(i, j int) bool {
	if c := h.q[i].expires.Compare(h.q[j].expires); c != 0 {
		return c < 0
	}
	return h.q[i].seq < h.q[j].seq
}
func (h *expiries[L, R, K]) Swap(i, j int) { h.q[i], h.q[j] = h.q[j], h.q[i] }
func (h *expiries[L, R, K]) Push(x any)    { h.q = append(h.q, x.(queued[L, R, K])) }
func (h *expiries[L, R, K]) Pop() any {
	n := len(h.q) - 1
	x := h.q[n]
	h.q[n] = queued[L, R, K]{}
	h.q = h.q[:n]
	return x
}

func (h *expiries[L, R, K]) push(q queued[L, R, K]) {
	h.seq++
	q.seq = h.seq
	heap.Push(h, q)
}

type joiner[L, R any, K comparable, Out any] struct {
	nr *nodeRun
	in *reader[either[L, R]]
	// out hands a pair on; lateOut a late item, with JoinLate (nil: the
	// failure action takes it).
	out      func(context.Context, envelope[Out]) error
	lateOut  func(context.Context, envelope[either[L, R]]) error
	flushOut func()
	closeOut func(context.Context) error
	keyL     func(L) K
	keyR     func(R) K
	join     func(L, R) Out
	within   time.Duration
	clock    clockwork.Clock
	lefts    map[K][]*waiting[L]
	rights   map[K][]*waiting[R]
	queue    expiries[L, R, K]
	// et is the watermark with JoinEventTime; nil on the clock.
	et    *joinWatermark[L, R]
	took  bool
	joins int64
}

func (j *joiner[L, R, K, Out]) open(context.Context) error       { return nil }
func (j *joiner[L, R, K, Out]) close(context.Context) error      { return nil }
func (j *joiner[L, R, K, Out]) consumed() bool                   { return j.took }
func (j *joiner[L, R, K, Out]) progress() int64                  { return j.joins }
func (j *joiner[L, R, K, Out]) restarting()                      {}
func (j *joiner[L, R, K, Out]) reopens() bool                    { return false }
func (j *joiner[L, R, K, Out]) finish(ctx context.Context) error { return j.closeOut(ctx) }

func (j *joiner[L, R, K, Out]) body(ctx context.Context) (err error) {
	defer j.in.n.flush()
	defer j.flushOut()
	defer func() {
		// A panic in a key function or join leaves the item it was
		// placing nowhere: the node fails for good, not restarted.
		var pe *resilience.PanicError
		if err != nil && errors.As(err, &pe) {
			err = &notRestartable{err}
		}
	}()
	defer recovered(&err)
	var timer clockwork.Timer
	arm := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		switch {
		case j.et != nil:
			// On event time only the idle timeout waits on the clock.
			if at, ok := j.et.idleAt(); ok {
				timer = newTimerAt(j.clock, at)
			}
		case len(j.queue.q) > 0:
			// At the expiry itself: a duration from a reading would fire
			// late by however far the clock moved before it was armed.
			timer = newTimerAt(j.clock, j.queue.q[0].expires)
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	if j.et != nil {
		j.et.started(j.clock.Now())
	}
	arm()
	for {
		var expired <-chan time.Time
		if timer != nil {
			expired = timer.Chan()
		}
		env, ok, timedOut, err := j.in.nextOr(ctx, expired)
		switch {
		case err != nil:
			return err
		case !ok && !timedOut:
			j.expire(time.Time{}, true)
			return nil
		}
		if j.et != nil {
			if err := j.onEventTime(ctx, env, timedOut); err != nil {
				return err
			}
			if timedOut || timer == nil {
				// An item only moves its input's idle instant later: a
				// timer still armed fires at or before the next one, and
				// is armed again then.
				arm()
			}
			continue
		}
		j.expire(j.clock.Now(), false)
		if !timedOut {
			j.took = true
			now := j.clock.Now()
			if err := j.arrive(ctx, env, now, now.Add(j.within)); err != nil {
				return err
			}
		}
		arm()
	}
}

// onEventTime takes an item on event time, or, when timedOut, marks the
// inputs that went idle, then lets go of the items the watermark passed.
func (j *joiner[L, R, K, Out]) onEventTime(ctx context.Context, env envelope[either[L, R]], timedOut bool) error {
	if timedOut {
		if j.et.idled(j.clock.Now()) {
			// Both inputs are quiet: what waits is let go as at the end
			// of input, and the watermark stays where it is.
			j.expire(time.Time{}, true)
			return nil
		}
	} else {
		j.took = true
		if err := j.arriveAt(ctx, env); err != nil {
			return err
		}
	}
	if wm, ok := j.et.mark(); ok {
		// An item waits until no partner that is not late can come: one
		// within of it is behind the watermark.
		j.expire(wm, false)
	}
	return nil
}

// arriveAt places an item on event time: a late one goes to the JoinLate
// stream or the failure action; another joins its partners within of its time and waits until
// the watermark passes its time by within.
func (j *joiner[L, R, K, Out]) arriveAt(ctx context.Context, env envelope[either[L, R]]) error {
	t := j.et.take(env.val, j.clock.Now())
	if wm, ok := j.et.mark(); ok && t.Before(wm) {
		return j.lateJoin(ctx, env, t, wm)
	}
	return j.arrive(ctx, env, t, t.Add(j.within))
}

// arrive joins env, of time t, with the partners waiting for it, then
// lets it wait until expires. On the clock every waiting partner arrived
// within of it; on event time only those less than within from t join.
func (j *joiner[L, R, K, Out]) arrive(ctx context.Context, env envelope[either[L, R]], t, expires time.Time) error {
	e := env.val
	near := func(u time.Time) bool {
		if j.et == nil {
			return true
		}
		d := t.Sub(u)
		return d < j.within && -d < j.within
	}
	if e.left {
		k := j.keyL(e.l)
		if selfUnequal(k) {
			// A NaN, or a key holding one: no map finds it again.
			return refuseItem(ctx, j.nr, j.clock.Now(), e.l, env.tr, &unequalKeyError{node: "Join", side: "left ", key: k})
		}
		me := &waiting[L]{val: e.l, tr: env.tr, t: t, expires: expires}
		j.lefts[k] = append(j.lefts[k], me)
		j.queue.push(queued[L, R, K]{key: k, expires: expires, l: me})
		for _, p := range j.rights[k] {
			if !near(p.t) {
				continue
			}
			if err := j.emit(ctx, e.l, p.val, me.tr, p.tr); err != nil {
				return err
			}
			me.joined++
			p.joined++
		}
		return nil
	}
	k := j.keyR(e.r)
	if selfUnequal(k) {
		return refuseItem(ctx, j.nr, j.clock.Now(), e.r, env.tr, &unequalKeyError{node: "Join", side: "right ", key: k})
	}
	me := &waiting[R]{val: e.r, tr: env.tr, t: t, expires: expires}
	j.rights[k] = append(j.rights[k], me)
	j.queue.push(queued[L, R, K]{key: k, expires: expires, r: me})
	for _, p := range j.lefts[k] {
		if !near(p.t) {
			continue
		}
		if err := j.emit(ctx, p.val, e.r, p.tr, me.tr); err != nil {
			return err
		}
		me.joined++
		p.joined++
	}
	return nil
}

// emit hands on one pair; its tracker finishes both items' parts. The
// pair is made before either item gets a part for it.
func (j *joiner[L, R, K, Out]) emit(ctx context.Context, l L, r R, lt, rt *tracker) error {
	v := j.join(l, r)
	var tr *tracker
	if lt != nil || rt != nil {
		tr = &tracker{parents: []*tracker{lt, rt}, window: true, quiet: (lt == nil || lt.quiet) && (rt == nil || rt.quiet)}
		tr.refs.Store(1)
		for _, p := range tr.parents {
			if p != nil {
				p.add(1) // one more part: this pair
			}
		}
	}
	j.joins++
	return j.out(ctx, envelope[Out]{val: v, tr: tr})
}

// expire lets go of the items whose window ended by now (all of them with
// all), the first to expire first: one that joined ends its own part
// without an outcome; one that did not is Filtered. now is the clock, or
// with JoinEventTime the watermark.
func (j *joiner[L, R, K, Out]) expire(now time.Time, all bool) {
	for len(j.queue.q) > 0 && (all || !now.Before(j.queue.q[0].expires)) {
		q := heap.Pop(&j.queue).(queued[L, R, K])
		if q.l != nil {
			j.lefts[q.key] = letGo(j, j.lefts[q.key], q.l)
			if len(j.lefts[q.key]) == 0 {
				delete(j.lefts, q.key)
			}
		} else {
			j.rights[q.key] = letGo(j, j.rights[q.key], q.r)
			if len(j.rights[q.key]) == 0 {
				delete(j.rights, q.key)
			}
		}
	}
}

// letGo ends w, one of ws, and returns the rest. On the clock it is the
// first (oldest).
func letGo[L, R any, K comparable, Out, T any](j *joiner[L, R, K, Out], ws []*waiting[T], w *waiting[T]) []*waiting[T] {
	switch i := slices.Index(ws, w); {
	case i < 0:
		return ws
	case i == 0:
		// On the clock always: the oldest goes without moving the rest.
		ws[0] = nil
		ws = ws[1:]
	default:
		ws = slices.Delete(ws, i, i+1)
	}
	if w.joined == 0 {
		j.nr.spec.stats.filtered.Add(1)
	}
	if w.tr != nil {
		if w.joined == 0 {
			w.tr.finish(node.Filtered)
		} else {
			w.tr.release()
		}
	}
	return ws
}
