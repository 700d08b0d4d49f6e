package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A WindowSpec says how [Aggregate] cuts a key's items into windows:
// [CountWindow], [TimeWindow], [SlidingWindow] or [SessionWindow]. The
// windows are on the pipeline's clock at arrival, or with [EventTime] on
// the items' own time.
type WindowSpec struct {
	count      int
	size, step time.Duration
	gap        time.Duration // a session window's
	session    bool
	made       windowMaker // which constructor made it, for its errors
}

// windowMaker names the constructor of a WindowSpec; the zero spec has
// none.
type windowMaker uint8

const (
	madeByNone windowMaker = iota
	madeByCount
	madeByTime
	madeBySliding
	madeBySession
)

// maxWindowsPerItem bounds the windows a SlidingWindow puts each item in,
// size/step: each is a window kept and handed on.
const maxWindowsPerItem = 10_000

// CountWindow is a tumbling window of n items of a key: every n items of
// the key make one window. On [EventTime], the items are taken in the
// order of their time, each once the watermark passed it.
func CountWindow(n int) WindowSpec { return WindowSpec{count: n, made: madeByCount} }

// TimeWindow is a tumbling window of d: an item of time t (its arrival on
// the pipeline's clock, or its [EventTime]) falls in the window
// [t.Truncate(d), that + d).
func TimeWindow(d time.Duration) WindowSpec {
	return WindowSpec{size: d, step: d, made: madeByTime}
}

// SlidingWindow is a window of size that starts every step: an item falls
// in every window whose span holds its time, size/step of them when step
// divides size. Build rejects a spec whose items could each fall in more
// than 10 000 windows.
func SlidingWindow(size, step time.Duration) WindowSpec {
	return WindowSpec{size: size, step: step, made: madeBySliding}
}

func (w WindowSpec) validate() error {
	switch w.made {
	case madeBySession:
		if w.gap <= 0 {
			return fmt.Errorf("SessionWindow(%s): the gap must be positive", w.gap)
		}
	case madeByCount:
		if w.count < 1 {
			return fmt.Errorf("CountWindow(%d): must be at least 1", w.count)
		}
	case madeByTime:
		if w.size <= 0 {
			return fmt.Errorf("TimeWindow(%s): the size must be positive", w.size)
		}
	case madeBySliding:
		switch {
		case w.size <= 0:
			return fmt.Errorf("SlidingWindow(%s, %s): the size must be positive", w.size, w.step)
		case w.step <= 0:
			return fmt.Errorf("SlidingWindow(%s, %s): the step must be positive", w.size, w.step)
		case w.step > w.size:
			return fmt.Errorf("SlidingWindow(%s, %s): the step must not be longer than the size, or items would fall in no window", w.size, w.step)
		case w.windowsPerItem() > maxWindowsPerItem:
			return fmt.Errorf("SlidingWindow(%s, %s): an item would fall in up to %d windows, more than %d", w.size, w.step, w.windowsPerItem(), maxWindowsPerItem)
		}
	default:
		return errors.New("the zero WindowSpec: make one with CountWindow, TimeWindow, SlidingWindow or SessionWindow")
	}
	return nil
}

// windowsPerItem is the most windows of a sliding spec an item falls in:
// size/step, rounded up (an item on a step's start is in the last one).
func (w WindowSpec) windowsPerItem() time.Duration {
	n := w.size / w.step
	if w.size%w.step != 0 {
		n++
	}
	return n
}

// A Window is one window's aggregate, as [Aggregate] hands it on.
type Window[K comparable, A any] struct {
	// Key is the key whose items the window holds.
	Key K
	// Start and End bound a time or session window, [Start, End), on the
	// pipeline's clock or, with EventTime, in event time; zero for a
	// count window. A session ends its gap after its last item.
	Start, End time.Time
	// Count is how many items the window holds.
	Count int
	// Value is the items reduced by add, from init().
	Value A
	// Partial says the window was handed on before it was complete: the
	// input ended first, or with EventTime the input went idle. A window
	// the idle timeout handed on is handed on again, an Update that is
	// not Partial, once the watermark passes its end; its updates before
	// that stay Partial.
	Partial bool
	// Update says the window was handed on before and this is its
	// correction: with AllowedLateness, items came for it after the
	// watermark passed its end. Count and Value are the whole window's,
	// the earlier items and the late ones; within a run, the later
	// hand-over replaces the earlier. Under WithCheckpoint, a run resumed
	// after a crash does not hand on again a window that the last save
	// recorded as written (see WithCheckpoint's window log), and hands on
	// again, whole, one written after that save. Where no window log is
	// kept (AllowedLateness, EventTime's idle timeout, count and session
	// windows, several sources), it may hand on again a window handed on
	// before the crash, rebuilt from only the items it read again, with
	// neither Update nor Partial set: keeping the first copy by Key and
	// Start is then right only without AllowedLateness and without the
	// idle timeout, and with updates no sink rule is right.
	Update bool
}

// Aggregate adds a node that groups the items of in by key(item) into
// windows (spec), reduces each window's items with add, starting from
// init(), and hands on one [Window] per window: when it is complete (a
// count window holds its n items; a time window's end passed on the
// pipeline's clock, or with [EventTime] the watermark passed it) and,
// marked Partial, when the input ends. Windows are handed on in the order
// they complete; windows of one key in the order of their start. A
// tracked item completes when every window it is in does.
//
// add must not keep the item; it runs on one goroutine. A panic in init,
// key, add or the EventTime function fails the node. For one window of
// everything, return a constant key.
func Aggregate[T any, K comparable, A any](b *Builder, name string, in Stream[T], key func(T) K, spec WindowSpec, init func() A, add func(A, T) A, opts ...NodeOption) Stream[Window[K, A]] {
	s := b.add(name, KindAggregate, opts, in.s)
	takeBatches[T](s)
	cfg := s.cfg
	s.validate = func() []error {
		var errs []error
		if key == nil || init == nil || add == nil {
			errs = append(errs, fmt.Errorf("Aggregate: key, init and add must not be nil"))
		}
		if err := spec.validate(); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, checkEventTime[T](cfg, spec)...)
		return append(errs, checkLate[T](cfg)...)
	}
	if et := cfg.eventTime; et != nil && et.idle == 0 && cfg.allowedLateness == 0 && spec.count == 0 && !spec.session {
		// A window of this node is handed on once, complete: it can be
		// recorded as written (see windowlog.go).
		s.windowKey = func() error { return jsonKeyProblem(reflect.TypeFor[K]()) }
	}
	newAggregator := func(nr *nodeRun) *aggregator[T, K, A] {
		n := nr.spec
		a := &aggregator[T, K, A]{nr: nr, in: newReader(nr.rs.edges[n.id].(edge[T]), n),
			key: key, spec: spec, init: init, add: add, clock: nr.rs.p.cfg.clock, wins: map[windowID[K]]*openWindow[T, K, A]{},
			seq: map[K]int64{}, tl: arrival[T]{}}
		if et := cfg.eventTime; et != nil {
			a.wmk = &watermark[T]{at: et.at.(func(T) time.Time), maxLateness: et.maxLateness, idle: et.idle}
			a.tl, a.event, a.allowed = a.wmk, true, cfg.allowedLateness
		}
		if spec.session {
			a.sessions = map[K][]windowID[K]{}
		}
		if n.logWindows {
			// The watermark starts where the checkpoint left it, so that
			// an item late before a crash is late again (windowlog.go).
			wm, ok := nr.rs.restoredWM[n.name]
			l, err := newWindowLog[K](n.name, nr.rs.restored[n.name], wm, ok)
			if err == nil {
				err = checkLoggedSpec(n.name, nr.rs.restored[n.name], spec.size, spec.step)
			}
			if err != nil {
				a.logErr = err
			} else {
				a.log = l
				l.step = spec.step
				nr.rs.windowLogs = append(nr.rs.windowLogs, l)
				// The log saves windows in Unix nanoseconds: an item
				// whose windows they cannot hold is refused.
				a.wmk.ranged, a.wmk.margin = true, spec.size
				if ok {
					a.wmk.restore(wm)
				}
			}
		}
		return a
	}
	s.newEdge = edgeOf[T]
	if cfg.late != nil {
		return lateSplit[T, K, A](b, s, cfg.late, newAggregator)
	}
	s.newRunner = func(nr *nodeRun) runner {
		a := newAggregator(nr)
		w := newWriter(outEdges[Window[K, A]](nr), nr.spec)
		a.out = func(ctx context.Context, env envelope[Window[K, A]]) error { return w.push(ctx, env) }
		a.flushOut, a.in.idle = w.out.flush, w.flush
		a.closeOut = w.close
		return a
	}
	return Stream[Window[K, A]]{b.output(s)}
}

type windowID[K comparable] struct {
	key K
	// start is a time window's start in Unix seconds, nsec its
	// nanoseconds (Unix nanoseconds alone would wrap: two starts 2^64 ns
	// apart shared a name); a count or session window's serial.
	start int64
	nsec  int32
}

// timeWindowID is the id of key's time window that starts at st.
func timeWindowID[K comparable](key K, st time.Time) windowID[K] {
	return windowID[K]{key: key, start: st.Unix(), nsec: int32(st.Nanosecond())}
}

type openWindow[T any, K comparable, A any] struct {
	win   Window[K, A]
	items []envelope[T] // those not handed on yet
	// fired says the window was handed on and is kept, for AllowedLateness,
	// until the watermark passes its end by that.
	fired bool
}

type aggregator[T any, K comparable, A any] struct {
	nr    *nodeRun
	in    *reader[T]
	key   func(T) K
	spec  WindowSpec
	init  func() A
	add   func(A, T) A
	clock clockwork.Clock
	// out hands a window on, lateOut a late item (nil: the failure
	// action takes it); flushOut and closeOut flush and close the output.
	out      func(context.Context, envelope[Window[K, A]]) error
	lateOut  func(context.Context, envelope[T]) error
	flushOut func()
	closeOut func(context.Context) error

	// tl places items in time and says how far windows close; event:
	// it is a watermark on the items' own time (wmk), with allowed
	// lateness.
	tl      timeline[T]
	wmk     *watermark[T]
	event   bool
	allowed time.Duration

	wins     map[windowID[K]]*openWindow[T, K, A]
	order    []windowID[K]       // open windows, in the order they opened (count) or of End
	kept     []windowID[K]       // fired windows kept for late items, in the order of End
	seq      map[K]int64         // the serial of a key's open count window
	sessions map[K][]windowID[K] // a key's open sessions
	serial   int64               // the last count or session window's serial
	pending  pendingItems[T]     // event-time count windows: items the watermark has not passed
	took     bool
	emitted  int64

	// log records the windows written, when the node keeps a window log
	// (see windowlog.go), else nil; logErr is why the saved one could not
	// be read. logWM is the watermark last given to log, logHi the latest
	// item.
	log    *windowLog[K]
	logErr error
	logWM  time.Time
	logSet bool
	logHi  uint64
}

func (a *aggregator[T, K, A]) open(context.Context) error       { return nil }
func (a *aggregator[T, K, A]) close(context.Context) error      { return nil }
func (a *aggregator[T, K, A]) consumed() bool                   { return a.took }
func (a *aggregator[T, K, A]) progress() int64                  { return a.emitted }
func (a *aggregator[T, K, A]) restarting()                      {}
func (a *aggregator[T, K, A]) reopens() bool                    { return false }
func (a *aggregator[T, K, A]) finish(ctx context.Context) error { return a.closeOut(ctx) }

// body adds each item to its windows and hands on the windows that
// complete; at the end of input it hands on the open ones, Partial. A
// panic in key, init, add or the event-time function fails the node for
// good: the item it was placing is then in no window, and a restart would
// lose it.
func (a *aggregator[T, K, A]) body(ctx context.Context) (err error) {
	defer a.in.n.flush()
	defer a.flushOut()
	defer func() {
		if err != nil {
			var pe *resilience.PanicError
			if errors.As(err, &pe) {
				err = &notRestartable{err}
			}
		}
	}()
	defer recovered(&err)
	if a.logErr != nil {
		return &notRestartable{a.logErr}
	}
	var timer clockwork.Timer
	arm := func() {
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		// Only when a window can close: at the instant the watermark
		// reaches the next end, or the input counts as idle.
		end, ok := a.nextEnd()
		if !ok {
			return
		}
		at, ok := a.tl.wake(end)
		if idle, iok := a.tl.idleAt(); iok && (!ok || idle.Before(at)) {
			at, ok = idle, true
		}
		if ok {
			// At the instant itself: a duration from a reading would
			// fire late by however far the clock moved before the
			// timer was armed.
			timer = newTimerAt(a.clock, at)
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
			if err := a.take(ctx, env); err != nil {
				return err
			}
		} else if at, ok := a.tl.idleAt(); ok && !a.clock.Now().Before(at) {
			a.tl.idled()
			if err := a.idleClose(ctx); err != nil {
				return err
			}
		}
		if err := a.due(ctx, a.tl.mark(a.clock.Now())); err != nil {
			return err
		}
		arm()
	}
}

// take lets one item move the timeline, notes it in the window log, if
// any, and judges it.
func (a *aggregator[T, K, A]) take(ctx context.Context, env envelope[T]) error {
	now := a.clock.Now()
	if a.log == nil {
		t, err := a.tl.take(env.val, now)
		if err != nil {
			return a.refuse(ctx, env, err)
		}
		return a.judge(ctx, env, t, now)
	}
	// The log notes the watermark each item was taken with, for the
	// watermark a save keeps; only an item later than those noted, or
	// one that moved the watermark, needs the log's lock.
	before, had := a.wmk.current()
	t, err := a.tl.take(env.val, now)
	if err != nil {
		return a.refuse(ctx, env, err)
	}
	idx := env.tr.ledgerIdx()
	if wm := a.tl.mark(now); idx > a.logHi || !a.logSet || !wm.Equal(a.logWM) {
		a.log.took(idx, before, had, wm)
		a.logWM, a.logSet, a.logHi = wm, true, max(a.logHi, idx)
	}
	return a.judge(ctx, env, t, now)
}

// refuse sends env, which the node cannot place for err (an event time
// its window log cannot hold, a key not equal to itself), to the node's
// failure action: it is the item's own fault, and retrying it would not
// change it.
func (a *aggregator[T, K, A]) refuse(ctx context.Context, env envelope[T], err error) error {
	return refuseItem(ctx, a.nr, a.clock.Now(), env.val, env.tr, err)
}

// judge places item env, of time t, taken in at now: in its windows,
// among the items an event-time count window waits on, or, when it is
// late, with the late items.
func (a *aggregator[T, K, A]) judge(ctx context.Context, env envelope[T], t, now time.Time) error {
	if a.event {
		if wm := a.tl.mark(now); t.Before(wm.Add(-a.allowed)) {
			return a.late(ctx, env, t, wm)
		}
		if a.spec.count > 0 {
			a.pending.push(env, t)
			return nil
		}
	}
	return a.place(ctx, env, t)
}

// place adds env, of time t, to every window it falls in, opening them as
// need be, and hands on the count window it fills and the fired windows
// it corrects.
func (a *aggregator[T, K, A]) place(ctx context.Context, env envelope[T], t time.Time) error {
	k := a.key(env.val)
	if selfUnequal(k) {
		// A NaN, or a key holding one: no map finds it again.
		return a.refuse(ctx, env, &unequalKeyError{node: "Aggregate", key: k})
	}
	switch {
	case a.spec.count > 0:
		return a.placeCount(ctx, env, k)
	case a.spec.session:
		return a.placeSession(env, k, t)
	}
	// Every window [start, start+size) with start on a step boundary
	// that holds t: the last start is t truncated to the step.
	var ids []windowID[K]
	var starts []time.Time
	last := t.Truncate(a.spec.step)
	for st := last; t.Before(st.Add(a.spec.size)); st = st.Add(-a.spec.step) {
		ids = append(ids, timeWindowID(k, st))
		starts = append(starts, st)
	}
	slices.Reverse(ids)
	slices.Reverse(starts)
	var corrected []windowID[K]
	placed := 0
	for i, id := range ids {
		w := a.wins[id]
		if w == nil && a.log != nil && a.log.written(id, starts[i].Add(a.spec.size), env.tr.ledgerIdx()) {
			// Written before a crash, and read again: not again.
			continue
		}
		if w == nil {
			w = &openWindow[T, K, A]{win: Window[K, A]{Key: k, Value: a.init(), Start: starts[i]}}
			w.win.End = w.win.Start.Add(a.spec.size)
			a.wins[id] = w
			a.insert(id)
		}
		if w.fired {
			corrected = append(corrected, id)
		}
		w.win.Value = a.add(w.win.Value, env.val)
		w.win.Count++
		if env.tr != nil && placed > 0 {
			// One more window waits on the item.
			env.tr.add(1)
		}
		placed++
		w.items = append(w.items, env)
	}
	if placed == 0 {
		// Every window of the item was written (the window log's):
		// dropped on purpose, as a Filter drops.
		n := a.nr.spec
		n.stats.filtered.Add(n.items(env.val))
		if env.tr != nil {
			env.tr.finish(node.Filtered)
		}
		return nil
	}
	for _, id := range corrected {
		if err := a.correct(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// placeCount adds env to its key's open count window, and hands it on
// when it is full.
func (a *aggregator[T, K, A]) placeCount(ctx context.Context, env envelope[T], k K) error {
	serial, ok := a.seq[k]
	if !ok {
		a.serial++
		serial = a.serial
		a.seq[k] = serial
	}
	id := windowID[K]{key: k, start: serial}
	w := a.wins[id]
	if w == nil {
		w = &openWindow[T, K, A]{win: Window[K, A]{Key: k, Value: a.init()}}
		a.wins[id] = w
		a.order = append(a.order, id)
	}
	w.win.Value = a.add(w.win.Value, env.val)
	w.win.Count++
	w.items = append(w.items, env)
	if w.win.Count < a.spec.count {
		return nil
	}
	// The key's next item opens a new window; the key is forgotten until
	// then, so that keys seen once do not pile up.
	delete(a.seq, k)
	return a.hand(ctx, id, false)
}

// insert puts time window id in the order, which keeps open time windows
// by End (ties in the order they opened): a sliding window of one key can
// open after a later-ending one of another.
func (a *aggregator[T, K, A]) insert(id windowID[K]) {
	a.order = insertByEnd(a.order, a.wins, id)
}

func insertByEnd[T any, K comparable, A any](order []windowID[K], wins map[windowID[K]]*openWindow[T, K, A], id windowID[K]) []windowID[K] {
	end := wins[id].win.End
	at, _ := slices.BinarySearchFunc(order, end, func(o windowID[K], end time.Time) int {
		if wins[o].win.End.After(end) {
			return 1
		}
		return -1
	})
	return slices.Insert(order, at, id)
}

// hand hands window id on, and forgets it unless it is kept for late
// items.
func (a *aggregator[T, K, A]) hand(ctx context.Context, id windowID[K], partial bool) error {
	w := a.wins[id]
	switch {
	case len(a.order) > 0 && a.order[0] == id:
		a.order = a.order[1:]
	case a.spec.session:
		// A session ends anywhere in the order once merged or extended.
		if i := slices.Index(a.order, id); i >= 0 {
			a.order = slices.Delete(a.order, i, i+1)
		}
	case len(a.order) > 2*len(a.wins)+16:
		// A count window completes anywhere in the order: the order
		// skips the windows handed on, and is compacted now and then.
		a.order = slices.DeleteFunc(a.order, func(o windowID[K]) bool { w := a.wins[o]; return w == nil || w.fired })
	}
	if a.spec.session {
		a.forgetSession(id)
	}
	if a.allowed > 0 && !partial && a.spec.count == 0 {
		w.fired = true
		a.kept = insertByEnd(a.kept, a.wins, id)
	} else {
		delete(a.wins, id)
	}
	w.win.Partial = partial
	if a.log != nil && !partial {
		// Complete, and handed on once: recorded as written once its
		// output settles. A Partial window is not: input that comes
		// later may fall in it.
		return a.sendThen(ctx, w, func(tr *tracker) {
			end := w.win.End
			tr.extra.settled = func() { a.log.record(id, end, tr) }
		})
	}
	return a.send(ctx, w)
}

// correct hands fired window id on again, with the items that came for
// it since, as an Update. A window the idle timeout handed on stays
// Partial until the watermark passes its end.
func (a *aggregator[T, K, A]) correct(ctx context.Context, id windowID[K]) error {
	w := a.wins[id]
	w.win.Update = true
	if w.win.Partial {
		w.win.Partial = a.tl.mark(a.clock.Now()).Before(w.win.End)
	}
	return a.send(ctx, w)
}

// send hands w's aggregate on, its items' trackers grouped into the
// window's.
func (a *aggregator[T, K, A]) send(ctx context.Context, w *openWindow[T, K, A]) error {
	return a.sendThen(ctx, w, nil)
}

// sendThen is send, with then called on the window's tracker, if it has
// one, before the window is handed on.
func (a *aggregator[T, K, A]) sendThen(ctx context.Context, w *openWindow[T, K, A], then func(*tracker)) error {
	tr := group(w.items)
	if tr != nil {
		tr.window = true
		if then != nil {
			then(tr)
		}
	}
	w.items = nil
	a.emitted++
	return a.out(ctx, envelope[Window[K, A]]{val: w.win, tr: tr})
}

// due hands on the windows the watermark wm passed: at the front of the
// order, which keeps time windows and sessions by End; for event-time
// count windows, it first places the items wm passed, in the order of
// their time. It forgets the fired windows wm passed by the allowed
// lateness.
func (a *aggregator[T, K, A]) due(ctx context.Context, wm time.Time) error {
	if a.spec.count > 0 {
		for a.pending.len() > 0 && a.pending.first().Before(wm) {
			env, t := a.pending.pop()
			if err := a.place(ctx, env, t); err != nil {
				return err
			}
		}
		return nil
	}
	for len(a.order) > 0 {
		id := a.order[0]
		if wm.Before(a.wins[id].win.End) {
			break
		}
		if err := a.hand(ctx, id, false); err != nil {
			return err
		}
	}
	// A window the idle timeout handed on, Partial, is complete once
	// the watermark passed its end: handed on once more, as an Update
	// that is not Partial, so that its last hand-over says so.
	for _, id := range a.kept {
		w := a.wins[id]
		if wm.Before(w.win.End) {
			break
		}
		if w.win.Partial {
			w.win.Partial, w.win.Update = false, true
			if err := a.send(ctx, w); err != nil {
				return err
			}
		}
	}
	for len(a.kept) > 0 {
		w := a.wins[a.kept[0]]
		if wm.Before(w.win.End.Add(a.allowed)) {
			break
		}
		delete(a.wins, a.kept[0])
		a.kept = a.kept[1:]
	}
	return nil
}

// idleClose hands on the windows open when the input went idle, Partial,
// without moving the watermark: an event-time count window's waiting
// items are placed, in the order of their time; a time window is kept,
// fired, so that an item that is not late still adds to it (handed on
// again as an Update) until the watermark passes its end by the allowed
// lateness; a session is closed.
func (a *aggregator[T, K, A]) idleClose(ctx context.Context) error {
	for a.pending.len() > 0 {
		env, t := a.pending.pop()
		if err := a.place(ctx, env, t); err != nil {
			return err
		}
	}
	if a.spec.count > 0 {
		return nil
	}
	for len(a.order) > 0 {
		id := a.order[0]
		if a.spec.session {
			if err := a.hand(ctx, id, true); err != nil {
				return err
			}
			continue
		}
		a.order = a.order[1:]
		w := a.wins[id]
		w.fired, w.win.Partial = true, true
		a.kept = insertByEnd(a.kept, a.wins, id)
		if err := a.send(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// flushAll hands on every open window at the end of input, Partial unless
// it is complete.
func (a *aggregator[T, K, A]) flushAll(ctx context.Context) error {
	wm := a.tl.mark(a.clock.Now())
	for a.pending.len() > 0 {
		env, t := a.pending.pop()
		if err := a.place(ctx, env, t); err != nil {
			return err
		}
	}
	for len(a.order) > 0 {
		id := a.order[0]
		w := a.wins[id]
		if w == nil || w.fired { // handed on already
			a.order = a.order[1:]
			continue
		}
		complete := (a.spec.count > 0 && w.win.Count >= a.spec.count) || (a.spec.count == 0 && !wm.Before(w.win.End))
		if err := a.hand(ctx, id, !complete); err != nil {
			return err
		}
	}
	return nil
}

// nextEnd returns the event or arrival time the next window waits for:
// the earliest end of an open time window or session (the first's), or,
// for an event-time count window, just after the earliest pending item.
func (a *aggregator[T, K, A]) nextEnd() (time.Time, bool) {
	if a.spec.count > 0 {
		if a.pending.len() > 0 {
			return a.pending.first().Add(time.Nanosecond), true
		}
		return time.Time{}, false
	}
	if len(a.order) == 0 {
		return time.Time{}, false
	}
	return a.wins[a.order[0]].win.End, true
}
