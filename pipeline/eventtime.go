package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
)

// EventTime makes an [Aggregate] cut its windows on the items' own time,
// at(item), instead of their arrival on the pipeline's clock, and close
// them on a watermark: the latest event time the node took in, less
// maxLateness (bounded out-of-orderness). A window is handed on once the
// watermark reaches its end; an item older than the watermark (less
// [AllowedLateness]) is late: see [ErrLate].
//
// The watermark moves only with the items the node takes in, so a quiet
// input would hold every window open: once no item came for idle on the
// pipeline's clock, the time and session windows open at that moment
// are handed on as they are, marked Partial; on a [CountWindow], the items
// that waited for the watermark join their windows in the order of their
// time, and only the windows they fill are handed on. The watermark does not move: an item that comes
// later (a backlog caught up after an outage) is late only if it is older
// than the watermark less [AllowedLateness], as before the pause. One that
// falls in a time window handed on by the idle timeout adds to it and
// hands it on again, marked Update, until the watermark passes its end by
// the allowed lateness. Such a window stays Partial until the watermark
// passes its end, and is then handed on once more, an Update that is not
// Partial. A session handed on by the idle timeout is closed, and a later
// item opens a new one. idle 0 turns the timeout off: windows then close
// only on items and at the end of the input.
//
// The option is generic because the item's type is: a [WindowSpec] is
// not, so it cannot carry a func(T) time.Time, and a node option keeps
// the window specs as they are. It applies to Aggregate alone; Build
// rejects it elsewhere, and when at is nil, a duration is negative, or T
// is not the node's item type.
func EventTime[T any](at func(T) time.Time, maxLateness, idle time.Duration) NodeOption {
	return func(c *nodeConfig) {
		c.eventTime = &eventTimeConfig{at: at, itemType: reflect.TypeFor[T](), maxLateness: maxLateness, idle: idle, nilAt: at == nil}
	}
}

// AllowedLateness keeps an [EventTime] window for d after the watermark
// passed its end: an item that falls in it meanwhile is added, and the
// window is handed on again, marked Update, with the corrected count and
// value. Only items older than the watermark less d are late. Build
// rejects a negative d, and AllowedLateness without EventTime or on a
// CountWindow (whose windows are cut in event-time order, so an item
// behind the watermark has no window left to correct).
//
// add keeps running on the value a window already handed on: with
// AllowedLateness, a value that add changes in place (a map, a slice)
// must not be changed by add; return a new one.
func AllowedLateness(d time.Duration) NodeOption {
	return func(c *nodeConfig) { c.allowedLateness, c.allowedSet = d, true }
}

// eventTimeConfig is the EventTime option, for Build and the node.
type eventTimeConfig struct {
	at                any // func(T) time.Time
	itemType          reflect.Type
	maxLateness, idle time.Duration
	nilAt             bool
}

// check returns the Build errors of the node's event-time options, for a
// node of item type T under spec.
func checkEventTime[T any](c nodeConfig, spec WindowSpec) []error {
	var errs []error
	et := c.eventTime
	if et == nil {
		if c.allowedSet {
			errs = append(errs, errors.New("AllowedLateness: needs EventTime; a window on the pipeline's clock has no late items"))
		}
		return errs
	}
	switch {
	case et.nilAt:
		errs = append(errs, errors.New("EventTime: the time function is nil"))
	case et.itemType != reflect.TypeFor[T]():
		errs = append(errs, fmt.Errorf("EventTime: the time function takes %s, and the node's items are %s", et.itemType, reflect.TypeFor[T]()))
	}
	if et.maxLateness < 0 {
		errs = append(errs, fmt.Errorf("EventTime: maxLateness %s: must not be negative", et.maxLateness))
	}
	if et.idle < 0 {
		errs = append(errs, fmt.Errorf("EventTime: idle %s: must not be negative (0 turns the idle timeout off)", et.idle))
	}
	if c.allowedSet {
		switch {
		case c.allowedLateness < 0:
			errs = append(errs, fmt.Errorf("AllowedLateness(%s): must not be negative", c.allowedLateness))
		case spec.count > 0:
			errs = append(errs, errors.New("AllowedLateness: a CountWindow on event time has no window to correct; its late items are all late"))
		case spec.session:
			errs = append(errs, errors.New("AllowedLateness: a late item could join a SessionWindow handed on with one still open; sessions take no allowed lateness"))
		}
	}
	return errs
}

// ErrLate is matched by the error of a late item: an [EventTime] item
// older than an Aggregate's watermark less its [AllowedLateness], whose
// windows were handed on and are gone, or a [JoinEventTime] item older
// than a Join's watermark, whose partners may have been let go. A late
// item goes to the node's failure action: the first failure rule that
// matches it, else DeadLetter (not OnItemFailure: a late item is not a
// failed call). Build therefore needs a dead-letter sink for an
// event-time Aggregate without a [Late] output and an event-time Join
// without [JoinLate] streams, even with a failure rule for ErrLate (a
// rule may take only some late items). Only an Aggregate's and a Join's
// late items get DeadLetter by default: an error of another node that
// wraps ErrLate goes to that node's failure rules and OnItemFailure like
// any other. It is counted in NodeStats.Late as well as by its action.
var ErrLate = errors.New("pipeline: late item")

// A LateError is the error of a late item; it matches [ErrLate].
type LateError struct {
	// EventTime is the item's own time.
	EventTime time.Time
	// Watermark is the node's watermark when the item came.
	Watermark time.Time
	// AllowedLateness is the node's allowed lateness: the item was older
	// than Watermark less it.
	AllowedLateness time.Duration
}

// Error says how late the item came.
func (e *LateError) Error() string {
	return fmt.Sprintf("pipeline: late item: its event time %s is %s behind the watermark %s (allowed lateness %s)",
		e.EventTime.Format(time.RFC3339Nano), e.Watermark.Sub(e.EventTime), e.Watermark.Format(time.RFC3339Nano), e.AllowedLateness)
}

// Is reports whether target is [ErrLate].
func (e *LateError) Is(target error) bool { return target == ErrLate }

// A timeline is where an aggregator's items sit in time and how far its
// windows may close: the pipeline's clock at arrival ([arrival]), or the
// items' own time under a watermark ([watermark]).
type timeline[T any] interface {
	// take returns the time of an item taken in at now, and lets the
	// item move the watermark; an item whose time the node cannot hold
	// (see [timeRangeError]) moves nothing, and take returns the error.
	take(item T, now time.Time) (time.Time, error)
	// mark returns the watermark at now: the windows that end by it close.
	mark(now time.Time) time.Time
	// wake returns the instant on the pipeline's clock at which the
	// watermark reaches end, if it does without more items.
	wake(end time.Time) (time.Time, bool)
	// idleAt returns the instant on the pipeline's clock at which the
	// input counts as idle, if it does and was not found idle since its
	// last item; idled records that it was.
	idleAt() (time.Time, bool)
	idled()
}

// arrival is the pipeline's clock: an item's time is when it came, and
// the watermark is now.
type arrival[T any] struct{}

func (arrival[T]) take(_ T, now time.Time) (time.Time, error) { return now, nil }
func (arrival[T]) mark(now time.Time) time.Time               { return now }
func (arrival[T]) wake(end time.Time) (time.Time, bool)       { return end, true }
func (arrival[T]) idleAt() (time.Time, bool)                  { return time.Time{}, false }
func (arrival[T]) idled()                                     {}

// A watermark is event time under bounded out-of-orderness: the latest
// event time taken in, less maxLateness, never going back. Only items
// move it: the idle timeout hands the open windows on (see
// [aggregator.idleClose]) and leaves it where it is.
type watermark[T any] struct {
	at                func(T) time.Time
	maxLateness, idle time.Duration
	// ranged: the node's windows are saved in a window log, which holds
	// only times Unix nanoseconds hold, and an item whose windows,
	// reaching margin either side of its time, lie beyond them is
	// refused (see [checkTimeRange]).
	ranged bool
	margin time.Duration

	seen   bool
	floor  bool      // wm was restored from a checkpoint: items only move it on
	quiet  bool      // the input was found idle since its last item
	latest time.Time // the latest event time taken in
	last   time.Time // when the last item came, on the pipeline's clock
	wm     time.Time // the watermark so far
}

func (w *watermark[T]) take(item T, now time.Time) (time.Time, error) {
	t := w.at(item)
	if w.ranged {
		if err := checkTimeRange(t, w.margin); err != nil {
			return t, err
		}
	}
	if !w.seen || t.After(w.latest) {
		w.latest = t
	}
	// The first item sets the watermark, whatever its time: the zero
	// time is no floor (a time of day parsed alone is in year 0). A
	// watermark restored from a checkpoint is one.
	if m := w.latest.Add(-w.maxLateness); (!w.seen && !w.floor) || m.After(w.wm) {
		w.wm = m
	}
	w.seen, w.quiet, w.last = true, false, now
	return t, nil
}

// Event times the window log of a node can hold: it saves its windows'
// starts and ends in Unix nanoseconds, and an int64 of nanoseconds since
// 1970 holds 1677-09-21 to 2262-04-11. Beyond them two windows 2^64 ns
// (about 584 years) apart would share a name in the log, and a resumed
// run would take one for the other.
var (
	minEventTime = time.Unix(0, math.MinInt64).UTC()
	maxEventTime = time.Unix(0, math.MaxInt64).UTC()
)

// checkTimeRange reports an event time t whose windows, reaching margin
// either side of it, would not lie between minEventTime and maxEventTime.
func checkTimeRange(t time.Time, margin time.Duration) error {
	if t.Add(-margin).Before(minEventTime) || t.Add(margin).After(maxEventTime) {
		return &timeRangeError{t: t}
	}
	return nil
}

// A timeRangeError is the failure of an item whose event time lies
// outside what an Aggregate's window log holds (a zero time.Time, a time
// parsed from a garbled field): the item goes to the node's failure
// action, and the watermark does not move.
type timeRangeError struct{ t time.Time }

func (e *timeRangeError) Error() string {
	return fmt.Sprintf("pipeline: EventTime: the item's event time %s is outside what the node's window log holds under WithCheckpoint (%s to %s, Unix nanoseconds)",
		e.t.Format(time.RFC3339Nano), minEventTime.Format(time.DateOnly), maxEventTime.Format(time.DateOnly))
}

func (w *watermark[T]) mark(time.Time) time.Time { return w.wm }

// current returns the watermark; ok false when it has none yet.
func (w *watermark[T]) current() (wm time.Time, ok bool) { return w.wm, w.seen || w.floor }

// restore starts the watermark at wm, saved by a checkpoint: items move
// it on from there, never back.
func (w *watermark[T]) restore(wm time.Time) { w.wm, w.floor = wm, true }

// wake: without items the watermark stays where it is.
func (w *watermark[T]) wake(time.Time) (time.Time, bool) { return time.Time{}, false }

func (w *watermark[T]) idleAt() (time.Time, bool) {
	if !w.seen || w.quiet || w.idle <= 0 {
		return time.Time{}, false
	}
	return addTimeSat(w.last, w.idle), true
}

func (w *watermark[T]) idled() { w.quiet = true }

// addTimeSat is t + d, held at the latest time a Duration from t reaches when
// that overflows (an idle of math.MaxInt64 says "never").
func addTimeSat(t time.Time, d time.Duration) time.Time {
	u := t.Add(d)
	if d > 0 && u.Before(t) {
		return t.Add(time.Duration(math.MaxInt64))
	}
	return u
}

// Late sends an [EventTime] Aggregate's late items to *out, a stream the
// caller then reads like any other, instead of the failure action: they
// are not failures there, and need no dead-letter sink. With Late, the
// node's windows come out of a node "name[windows]" and its late items
// out of "name[late]", both of kind branch, as a [Split]'s do; *out is set
// when Aggregate returns. Build rejects Late without EventTime, a nil
// out, or a T that is not the node's item type.
func Late[T any](out *Stream[T]) NodeOption {
	return func(c *nodeConfig) {
		c.late = &lateOutput{out: out, itemType: reflect.TypeFor[T](), nilOut: out == nil}
	}
}

// lateOutput is the Late option.
type lateOutput struct {
	out      any // *Stream[T]
	itemType reflect.Type
	nilOut   bool
}

// checkLate returns the Build error of an Aggregate's Late option.
func checkLate[T any](c nodeConfig) []error {
	l := c.late
	switch {
	case l == nil:
		return nil
	case c.eventTime == nil:
		return []error{errors.New("Late: needs EventTime; a window on the pipeline's clock has no late items")}
	case l.nilOut:
		return []error{errors.New("Late: the stream pointer is nil")}
	case l.itemType != reflect.TypeFor[T]():
		return []error{fmt.Errorf("Late: the stream is of %s, and the node's items are %s", l.itemType, reflect.TypeFor[T]())}
	}
	return nil
}

// checkEventTimeKind returns the Build errors of the event-time options
// of node n: on a node other than an Aggregate, and, on an event-time
// Aggregate whose late items go to the failure action, the lack of a
// dead-letter sink, which the action DeadLetter needs, unless a failure
// rule takes late items. It runs once the node's resilience is resolved.
func checkEventTimeKind(cfg config, n *spec) []error {
	c := n.cfg
	if n.kind != KindAggregate {
		if c.eventTime != nil || c.allowedSet || c.late != nil {
			return []error{fmt.Errorf("EventTime, AllowedLateness and Late: only an Aggregate has windows, not a %s", n.kind)}
		}
		return nil
	}
	if c.eventTime == nil || c.late != nil || cfg.deadLetter != nil {
		return nil
	}
	// A failure rule cannot stand in for the sink: Build has no late
	// item to try it on, and one that takes some late items (late by at
	// most an hour) leaves the others to DeadLetter.
	return []error{errors.New("EventTime: late items are dead-lettered, and the pipeline has no dead-letter sink (WithDeadLetter); take them with Late, or add the sink (a FailureRule for ErrLate is not enough: a late item it does not take is dead-lettered)")}
}

// late hands on or fails a late item: to the Late output when there is
// one, else to the node's failure action.
func (a *aggregator[T, K, A]) late(ctx context.Context, env envelope[T], t, wm time.Time) error {
	n := a.nr.spec
	n.stats.late.Add(n.items(env.val))
	if a.lateOut != nil {
		return a.lateOut(ctx, env)
	}
	now := a.clock.Now()
	fl := &failure{err: &LateError{EventTime: t, Watermark: wm, AllowedLateness: a.allowed}, first: now, last: now, late: true}
	if err := a.nr.itemFailed(ctx, env.val, env.tr, fl); err != nil {
		if errors.Is(err, ErrLate) {
			// The item is taken: a restart would not see it again.
			return &notRestartable{err}
		}
		return err
	}
	return nil
}

// aggOut is what an Aggregate with a Late output hands its two branches:
// a window, or a late item.
type aggOut[T any, K comparable, A any] struct {
	win  Window[K, A]
	item T
}

// lateSplit makes aggregator s hand its windows and late items on to two
// branch nodes, and returns the windows' stream; *late gets the late
// items'.
func lateSplit[T any, K comparable, A any](b *Builder, s *spec, late *lateOutput, newAggregator func(*nodeRun) *aggregator[T, K, A]) Stream[Window[K, A]] {
	s.newRunner = func(nr *nodeRun) runner {
		a := newAggregator(nr)
		w := newWriter(outEdges[routed[aggOut[T, K, A]]](nr), nr.spec)
		if w.fan != nil {
			w.fan.pick = branchOf[aggOut[T, K, A]]
		}
		a.out = func(ctx context.Context, env envelope[Window[K, A]]) error {
			return w.push(ctx, envelope[routed[aggOut[T, K, A]]]{val: routed[aggOut[T, K, A]]{branch: 0, val: aggOut[T, K, A]{win: env.val}}, tr: env.tr})
		}
		a.lateOut = func(ctx context.Context, env envelope[T]) error {
			return w.push(ctx, envelope[routed[aggOut[T, K, A]]]{val: routed[aggOut[T, K, A]]{branch: 1, val: aggOut[T, K, A]{item: env.val}}, tr: env.tr})
		}
		a.flushOut, a.in.idle = w.out.flush, w.flush
		a.closeOut = w.close
		return a
	}
	out := b.output(s)
	wins := branch(b, s.name+"[windows]", out, func(o aggOut[T, K, A]) Window[K, A] { return o.win })
	items := branch(b, s.name+"[late]", out, func(o aggOut[T, K, A]) T { return o.item })
	if p, ok := late.out.(*Stream[T]); ok && p != nil {
		*p = items
	}
	return wins
}

// branch adds a branch node that takes the items routed to it from out
// and hands on what f makes of each.
func branch[R, Out any](b *Builder, name string, out *stream, f func(R) Out) Stream[Out] {
	br := b.add(name, KindBranch, nil, out)
	br.newEdge = edgeOf[routed[R]]
	br.newRunner = func(nr *nodeRun) runner {
		call := func(_ context.Context, rv routed[R]) (Out, error) { return f(rv.val), nil }
		return newProc(nr, nil, call, func(ctx context.Context, w *writer[Out], _ *tally, env envelope[routed[R]], v Out) error {
			return w.push(ctx, envelope[Out]{val: v, tr: env.tr})
		})
	}
	return Stream[Out]{b.output(br)}
}
