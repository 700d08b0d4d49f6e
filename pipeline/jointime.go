package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// JoinEventTime makes a [Join] match on the items' own times, atL(l) and
// atR(r), instead of their arrival on the pipeline's clock: a left and a
// right item with equal keys join when their event times are less than
// within apart, in whatever order and however far apart on the clock
// they come.
//
// Each input has a watermark, the latest event time it brought less
// maxLateness (bounded out-of-orderness), and the node's watermark is the
// lower of the two, never going back: an input that is behind, or has
// brought nothing yet, holds it back. An item waits for partners until
// the watermark passes its event time by within (expiry follows the
// watermark, not the clock), and at the end of input.
//
// The watermark moves only with items, so a quiet input would hold it,
// and every item of the other input (under WithCheckpoint, its position
// too), for ever. An input that brought no item for idle on the pipeline's
// clock (since the node started, for one that brought none) is idle: it
// no longer holds the watermark, which follows the other input alone. Its
// next item makes it hold the watermark again from where it is, and that
// item is late if it is older. Once both inputs are idle, the items
// waiting are let go as at the end of input (those that joined nothing
// are Filtered), and the watermark stays where it is, as an [EventTime]
// Aggregate hands its open windows on. idle 0 turns the timeout off.
//
// An item older than the watermark is late, as in an [EventTime]
// Aggregate: its partners may have been let go. It is counted in
// NodeStats.Late and goes to the [JoinLate] streams when the node has
// them, else to the node's failure action with a [LateError] (the first
// failure rule that matches it, else DeadLetter), so Build then needs a
// dead-letter sink.
//
// Build rejects JoinEventTime on a node other than a Join, a nil time
// function, a negative duration, and L or R that are not the Join's
// item types. [Late] and [AllowedLateness] are an Aggregate's alone.
func JoinEventTime[L, R any](atL func(L) time.Time, atR func(R) time.Time, maxLateness, idle time.Duration) NodeOption {
	return func(c *nodeConfig) {
		c.joinTime = &joinTimeConfig{atL: atL, atR: atR, nilAt: atL == nil || atR == nil,
			left: reflect.TypeFor[L](), right: reflect.TypeFor[R](), maxLateness: maxLateness, idle: idle}
	}
}

// joinTimeConfig is the JoinEventTime option.
type joinTimeConfig struct {
	atL, atR          any // func(L) time.Time, func(R) time.Time
	nilAt             bool
	left, right       reflect.Type
	maxLateness, idle time.Duration
}

// JoinLate sends a [JoinEventTime] Join's late items to *lateL (those of
// the left input) and *lateR (the right's), streams the caller then reads
// like any other, instead of the failure action: they are not failures
// there, and need no dead-letter sink. With JoinLate, the node's pairs
// come out of a node "name[joins]" and its late items out of
// "name[late left]" and "name[late right]", all of kind branch, as an
// Aggregate's with [Late]; *lateL and *lateR are set when Join returns,
// and Build fails while either is read by no node. Build rejects JoinLate
// without JoinEventTime, on a node other than a Join, with a nil pointer,
// or with L or R that are not the Join's item types.
func JoinLate[L, R any](lateL *Stream[L], lateR *Stream[R]) NodeOption {
	return func(c *nodeConfig) {
		c.joinLate = &joinLateOutput{outL: lateL, outR: lateR, left: reflect.TypeFor[L](), right: reflect.TypeFor[R](),
			nilOut: lateL == nil || lateR == nil}
	}
}

// joinLateOutput is the JoinLate option.
type joinLateOutput struct {
	outL, outR  any // *Stream[L], *Stream[R]
	left, right reflect.Type
	nilOut      bool
}

// checkJoinTime returns the Build errors of a Join's JoinEventTime and
// JoinLate options.
func checkJoinTime[L, R any](c nodeConfig) []error {
	var errs []error
	if jl := c.joinLate; jl != nil {
		switch {
		case c.joinTime == nil:
			errs = append(errs, errors.New("JoinLate: needs JoinEventTime; a join on the pipeline's clock has no late items"))
		case jl.nilOut:
			errs = append(errs, errors.New("JoinLate: a stream pointer is nil"))
		case jl.left != reflect.TypeFor[L]() || jl.right != reflect.TypeFor[R]():
			errs = append(errs, fmt.Errorf("JoinLate: the streams are of %s and %s, and the join's items are %s and %s",
				jl.left, jl.right, reflect.TypeFor[L](), reflect.TypeFor[R]()))
		}
	}
	jt := c.joinTime
	if jt == nil {
		return errs
	}
	switch {
	case jt.nilAt:
		errs = append(errs, errors.New("JoinEventTime: a time function is nil"))
	case jt.left != reflect.TypeFor[L]() || jt.right != reflect.TypeFor[R]():
		errs = append(errs, fmt.Errorf("JoinEventTime: the time functions take %s and %s, and the join's items are %s and %s",
			jt.left, jt.right, reflect.TypeFor[L](), reflect.TypeFor[R]()))
	}
	if jt.maxLateness < 0 {
		errs = append(errs, fmt.Errorf("JoinEventTime: maxLateness %s: must not be negative", jt.maxLateness))
	}
	if jt.idle < 0 {
		errs = append(errs, fmt.Errorf("JoinEventTime: idle %s: must not be negative (0 turns the idle timeout off)", jt.idle))
	}
	return errs
}

// checkJoinTimeKind returns the Build errors of JoinEventTime and
// JoinLate on node n: on a node other than a Join, Late on a Join, and a
// Join whose late items are dead-lettered in a pipeline without a
// dead-letter sink.
func checkJoinTimeKind(cfg config, n *spec) []error {
	c := n.cfg
	if n.kind != KindJoin {
		var errs []error
		if c.joinTime != nil {
			errs = append(errs, fmt.Errorf("JoinEventTime: only a Join matches on event time, not a %s", n.kind))
		}
		if c.joinLate != nil {
			errs = append(errs, fmt.Errorf("JoinLate: only a Join has late left and right items, not a %s", n.kind))
		}
		return errs
	}
	var errs []error
	if c.late != nil {
		errs = append(errs, errors.New("Late: a Join's late items come from two inputs; take them with JoinLate(&lateLeft, &lateRight)"))
	}
	if c.joinTime != nil && c.joinLate == nil && cfg.deadLetter == nil {
		errs = append(errs, errors.New("JoinEventTime: late items are dead-lettered, and the pipeline has no dead-letter sink (WithDeadLetter); take them with JoinLate, or add the sink"))
	}
	return errs
}

// joinWatermark is a Join's event time: each input's latest event time
// less maxLateness; the join's watermark is the lower of the two inputs
// that are not idle, never going back.
type joinWatermark[L, R any] struct {
	atL               func(L) time.Time
	atR               func(R) time.Time
	maxLateness, idle time.Duration
	// Per input, [0] left and [1] right: whether it brought an item, the
	// latest event time it brought, when its last item came (or the node
	// started) on the pipeline's clock, and whether it was found idle
	// since.
	seen   [2]bool
	latest [2]time.Time
	last   [2]time.Time
	quiet  [2]bool
	// wm is the watermark so far, once set.
	wm    time.Time
	wmSet bool
}

func sideOf(left bool) int {
	if left {
		return 0
	}
	return 1
}

// started starts the idle timeout of an input that has brought nothing
// yet, once, when the node first runs.
func (w *joinWatermark[L, R]) started(now time.Time) {
	for s := range 2 {
		if !w.seen[s] && w.last[s].IsZero() {
			w.last[s] = now
		}
	}
}

// take returns the event time of e, which came at now, and lets it move
// its input's watermark.
func (w *joinWatermark[L, R]) take(e either[L, R], now time.Time) time.Time {
	var t time.Time
	if e.left {
		t = w.atL(e.l)
	} else {
		t = w.atR(e.r)
	}
	s := sideOf(e.left)
	if !w.seen[s] || t.After(w.latest[s]) {
		w.latest[s] = t
	}
	w.seen[s], w.quiet[s], w.last[s] = true, false, now
	return t
}

// mark moves the watermark to the lowest of the inputs that hold it and
// returns it; ok is false while it was never set: an input that is not
// idle and has brought nothing holds every item.
func (w *joinWatermark[L, R]) mark() (wm time.Time, ok bool) {
	var low time.Time
	held := false
	for s := range 2 {
		switch {
		case w.quiet[s]:
			continue
		case !w.seen[s]:
			return w.wm, w.wmSet
		}
		if m := w.latest[s].Add(-w.maxLateness); !held || m.Before(low) {
			low = m
		}
		held = true
	}
	if held && (!w.wmSet || low.After(w.wm)) {
		w.wm, w.wmSet = low, true
	}
	return w.wm, w.wmSet
}

// idleAt returns the instant on the pipeline's clock at which the next
// input that is not idle yet counts as idle, if one does.
func (w *joinWatermark[L, R]) idleAt() (at time.Time, ok bool) {
	if w.idle <= 0 {
		return at, false
	}
	for s := range 2 {
		if w.quiet[s] {
			continue
		}
		if u := addTimeSat(w.last[s], w.idle); !ok || u.Before(at) {
			at, ok = u, true
		}
	}
	return at, ok
}

// idled marks the inputs that count as idle at now, and reports whether
// both do.
func (w *joinWatermark[L, R]) idled(now time.Time) (both bool) {
	if w.idle <= 0 {
		return false
	}
	for s := range 2 {
		if !w.quiet[s] && !now.Before(addTimeSat(w.last[s], w.idle)) {
			w.quiet[s] = true
		}
	}
	return w.quiet[0] && w.quiet[1]
}

// lateJoin hands on or fails a late item of a join: it is counted, and
// goes to the JoinLate stream of its side when there is one, else to the
// node's failure action.
func (j *joiner[L, R, K, Out]) lateJoin(ctx context.Context, env envelope[either[L, R]], t, wm time.Time) error {
	n := j.nr.spec
	n.stats.late.Add(1)
	if j.lateOut != nil {
		return j.lateOut(ctx, env)
	}
	var item any = env.val.r
	if env.val.left {
		item = env.val.l
	}
	now := j.clock.Now()
	fl := &failure{err: &LateError{EventTime: t, Watermark: wm}, first: now, last: now, late: true}
	if err := j.nr.itemFailed(ctx, item, env.tr, fl); err != nil {
		if errors.Is(err, ErrLate) {
			return &notRestartable{err}
		}
		return err
	}
	return nil
}

// joinOut is what a Join with JoinLate hands its three branches: a pair,
// a late left item, or a late right one.
type joinOut[L, R, Out any] struct {
	pair Out
	l    L
	r    R
}

// The branches of a Join with JoinLate, in the order of its output edges.
const (
	joinBranchPairs = iota
	joinLateLeft
	joinLateRight
)

// joinLateSplit makes join s hand its pairs and late items on to three
// branch nodes, and returns the pairs' stream; the JoinLate pointers get
// the late items' streams.
func joinLateSplit[L, R any, K comparable, Out any](b *Builder, s *spec, late *joinLateOutput, newJoiner func(*nodeRun) *joiner[L, R, K, Out]) Stream[Out] {
	type jo = joinOut[L, R, Out]
	s.newRunner = func(nr *nodeRun) runner {
		j := newJoiner(nr)
		w := newWriter(outEdges[routed[jo]](nr), nr.spec)
		if w.fan != nil {
			w.fan.pick = branchOf[jo]
		}
		j.out = func(ctx context.Context, env envelope[Out]) error {
			return w.push(ctx, envelope[routed[jo]]{val: routed[jo]{branch: joinBranchPairs, val: jo{pair: env.val}}, tr: env.tr})
		}
		j.lateOut = func(ctx context.Context, env envelope[either[L, R]]) error {
			rv := routed[jo]{branch: joinLateRight, val: jo{r: env.val.r}}
			if env.val.left {
				rv = routed[jo]{branch: joinLateLeft, val: jo{l: env.val.l}}
			}
			return w.push(ctx, envelope[routed[jo]]{val: rv, tr: env.tr})
		}
		j.flushOut, j.in.idle = w.out.flush, w.flush
		j.closeOut = w.close
		return j
	}
	out := b.output(s)
	pairs := branch(b, s.name+"[joins]", out, func(o jo) Out { return o.pair })
	lefts := branch(b, s.name+"[late left]", out, func(o jo) L { return o.l })
	rights := branch(b, s.name+"[late right]", out, func(o jo) R { return o.r })
	if p, ok := late.outL.(*Stream[L]); ok && p != nil {
		*p = lefts
	}
	if p, ok := late.outR.(*Stream[R]); ok && p != nil {
		*p = rights
	}
	return pairs
}
