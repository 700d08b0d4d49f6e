package pipeline

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// defaultMaxParked is the items a node parks at most without [MaxParked].
const defaultMaxParked = 1024

// MaxParked caps the items a node parks at once: items whose retry waits
// (a backoff, a RetryAfter) while the node's workers take other work. A
// parked item costs one timer of the pipeline's clock and its retry state,
// no goroutine. When n items are parked, a Parallel node takes no new
// input, and an item about to park waits for room on its worker, until
// one of them wakes: backpressure, nothing is dropped. That wait counts
// in the item's own wait, and a retry that could start only past the
// node's MaxElapsed is not made (see resilience.ItemRetryOptions). The
// default, 1024, covers a tenth of the items failing with a 500 ms wait
// at 20,000 items a second, and keeps a node's parked items to a few
// hundred kilobytes. n must be at least 1.
//
// Only a node whose calls need not run in input order parks: Keyed (the
// waiting item's key stays blocked, other keys flow), Parallel (ordered:
// its output slot stays reserved, later results wait behind it in the
// node's reorder window of 4*n items, or more when the node's buffer
// gives its workers' queues more room) and
// Parallel with Unordered (any item may pass it). A node with the default
// single worker waits in place: no later call starts while an earlier
// item waits, and MaxParked changes nothing.
func MaxParked(n int) NodeOption {
	return func(c *nodeConfig) { c.maxParked, c.maxParkedSet = n, true }
}

// parkCheck returns the Build error of a node's MaxParked option.
func parkCheck(c nodeConfig) error {
	if c.maxParkedSet && c.maxParked < 1 {
		return fmt.Errorf("MaxParked(%d): must be at least 1", c.maxParked)
	}
	return nil
}

// maxParkedOr returns the node's MaxParked, else the default.
func (c *nodeConfig) maxParkedOr() int {
	if c.maxParkedSet {
		return c.maxParked
	}
	return defaultMaxParked
}

// A parkSlot is an ordered node's output place of a parked item: the
// collector waits on done for the item's result.
type parkSlot struct {
	r       any
	deliver bool
	done    chan struct{}
}

// fill gives the slot its item's result and wakes the collector.
func (s *parkSlot) fill(r any, deliver bool) {
	s.r, s.deliver = r, deliver
	close(s.done)
}

// A parking holds the parked items of one body of a node: each waits on a
// timer of the pipeline's clock (on the real clock a runtime timer: no
// goroutine per item), and when its timer fires it goes to wake (called
// with the parking's lock held, so it must not wait), or, when wake is
// nil, to a queue that the node's workers serve before new input.
//
// It also keeps the node's holds, so that its workers know when their work
// ends: every item parked or woken holds one, and so does every chunk the
// dealer sent (enter) until its worker is done with it (leave). Once the
// input ended and no hold is left, finished is closed.
type parking[T any] struct {
	clock clockwork.Clock
	max   int
	wake  func(T)

	// The counts, read without mu on the path of every chunk: the
	// parked items, the woken ones and the holds.
	nParked, nWoken, holds atomic.Int64
	ended                  atomic.Bool

	mu       sync.Mutex
	parked   map[*parkedItem[T]]struct{}
	woken    []T           // waiting for a worker, oldest first
	signal   chan struct{} // holds a token while woken is not empty
	room     chan struct{} // closed and replaced when a parked item wakes
	finished chan struct{}
	closed   bool
	// back, once the run drains, takes back a parked item for its source's
	// broker: it reports whether the item leaves its wait now (see recall).
	back func(T) bool
}

type parkedItem[T any] struct {
	v     T
	timer clockwork.Timer
	due   time.Time      // when timer is due
	late  *time.Duration // when not nil, gets how late timer fired
}

func newParking[T any](clock clockwork.Clock, max int, wake func(T)) *parking[T] {
	return &parking[T]{
		clock: clock, max: max, wake: wake,
		parked: make(map[*parkedItem[T]]struct{}),
		signal: make(chan struct{}, 1), room: make(chan struct{}), finished: make(chan struct{}),
	}
}

// full returns, when max items are parked, a channel closed once one of
// them wakes; nil otherwise.
func (pk *parking[T]) full() <-chan struct{} {
	if pk.nParked.Load() < int64(pk.max) {
		return nil
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if len(pk.parked) < pk.max {
		return nil
	}
	return pk.room
}

// park parks v until until, once there is room, and takes a hold for it:
// a wait for room counts in the item's wait, and v wakes at once when
// room came only after until. When v wakes, late, if not nil, gets how
// late its timer fired. park returns ctx's cause when ctx ends first, or
// when the body ended. Once the run drains (see recall), an item that
// goes back to its broker does not wait: it joins the woken items at once.
func (pk *parking[T]) park(ctx context.Context, v T, until time.Time, late *time.Duration) error {
	pk.mu.Lock()
	for {
		if pk.back != nil && !pk.closed && ctx.Err() == nil && pk.back(v) {
			// The run drains, and v goes back to its broker: a worker
			// hands it back at once, instead of waiting. Looked at again
			// after each wait for room, since a drain that starts
			// meanwhile makes the room (it recalls the parked items).
			pk.holds.Add(1)
			pk.queue(v)
			pk.mu.Unlock()
			return nil
		}
		if len(pk.parked) < pk.max || pk.closed {
			break
		}
		room := pk.room
		pk.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		pk.mu.Lock()
	}
	defer pk.mu.Unlock()
	if pk.closed || ctx.Err() != nil {
		return context.Cause(ctx)
	}
	now := pk.clock.Now()
	d := max(0, until.Sub(now))
	it := &parkedItem[T]{v: v, due: now.Add(d), late: late}
	pk.parked[it] = struct{}{}
	pk.nParked.Add(1)
	pk.holds.Add(1)
	// Under mu: a timer that fires at once waits for it, and finds the
	// item parked.
	it.timer = pk.clock.AfterFunc(d, func() { pk.woke(it) })
	return nil
}

// woke moves it, whose timer fired, from the parked items to wake or the
// queue of woken items.
func (pk *parking[T]) woke(it *parkedItem[T]) {
	pk.mu.Lock()
	if _, ok := pk.parked[it]; !ok || pk.closed {
		pk.mu.Unlock()
		return
	}
	if it.late != nil {
		*it.late = max(0, pk.clock.Since(it.due))
	}
	pk.leaves(it)
	pk.mu.Unlock()
	if h := parkWokeHook.Load(); h != nil {
		(*h)()
	}
}

// parkWokeHook, when set (by a test, through export_test.go), runs each
// time woke moved a parked item whose timer fired to the woken ones: the
// timer's function runs on a goroutine of its own, and a test that must
// know an item woke before it goes on waits for it.
var parkWokeHook atomic.Pointer[func()]

// leaves moves it from the parked items to wake or the queue of woken
// items; mu is held.
func (pk *parking[T]) leaves(it *parkedItem[T]) {
	delete(pk.parked, it)
	pk.nParked.Add(-1)
	close(pk.room)
	pk.room = make(chan struct{})
	pk.queue(it.v)
}

// queue gives v to wake, else to the queue of woken items; mu is held.
func (pk *parking[T]) queue(v T) {
	if pk.wake != nil {
		// Under mu, as close takes it: the item is either handed to wake
		// before the body's end collects what wake fed, or left to close.
		// wake must not wait.
		pk.wake(v)
		return
	}
	pk.woken = append(pk.woken, v)
	pk.nWoken.Add(1)
	pk.poke()
}

// recall is what a drain does to the parking: every parked item that back
// takes back leaves its wait now, for a worker to hand it to its source's
// broker, and so does every item parked from then on that back takes.
// back runs with mu held, so it must not wait. An item that already woke,
// or one that back does not take, finishes its wait here; so does a
// recalled item whose wait ended before a worker took it (see
// itemRetryFrom).
func (pk *parking[T]) recall(back func(T) bool) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.closed {
		return
	}
	pk.back = back
	for it := range pk.parked {
		if back(it.v) {
			// A timer that fired meanwhile waits for mu, and then finds
			// the item gone.
			it.timer.Stop()
			pk.leaves(it)
		}
	}
	// An item waiting for room looks at back again now, even when no
	// parked item left (none that back takes): it may go back itself.
	close(pk.room)
	pk.room = make(chan struct{})
}

// poke leaves a token in signal; mu is held.
func (pk *parking[T]) poke() {
	select {
	case pk.signal <- struct{}{}:
	default:
	}
}

// take returns the oldest woken item, whose hold passes to the caller:
// it calls leave once done with it.
func (pk *parking[T]) take() (T, bool) {
	var v T
	if pk.nWoken.Load() == 0 {
		return v, false
	}
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if len(pk.woken) == 0 {
		return v, false
	}
	pk.nWoken.Add(-1)
	v = pk.woken[0]
	var zero T
	pk.woken[0] = zero
	pk.woken = pk.woken[1:]
	if len(pk.woken) > 0 {
		pk.poke()
	}
	return v, true
}

// enter takes a hold for a chunk of input on its way to a worker.
func (pk *parking[T]) enter() { pk.holds.Add(1) }

// leave gives up a hold.
func (pk *parking[T]) leave() {
	if pk.holds.Add(-1) == 0 && pk.ended.Load() {
		pk.check()
	}
}

// end records that the input ended: every chunk of it took its hold.
func (pk *parking[T]) end() {
	pk.ended.Store(true)
	pk.check()
}

// check closes finished once the input ended and no hold is left. Each of
// leave and end writes its own count before it reads the other's, so
// that the last of them sees both.
func (pk *parking[T]) check() {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	if pk.ended.Load() && pk.holds.Load() == 0 {
		select {
		case <-pk.finished:
		default:
			close(pk.finished)
		}
	}
}

// close ends the parking when its body ends: no parked item wakes any
// more. It returns the items still parked or woken.
func (pk *parking[T]) close() []T {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	pk.closed = true
	var left []T
	for it := range pk.parked {
		it.timer.Stop()
		left = append(left, it.v)
	}
	clear(pk.parked)
	pk.nParked.Store(0)
	left = append(left, pk.woken...)
	pk.woken = nil
	pk.nWoken.Store(0)
	return left
}

// park parks j on pk for its wait. When the body ends first, j is
// recorded as an item whose wait the end cut short (see unpark).
func (p *proc[In, R, Out]) park(ctx context.Context, pk *parking[job[In]], j job[In]) error {
	err := pk.park(ctx, j, j.st.until, &j.st.late)
	if err != nil {
		p.unpark(ctx, []job[In]{j})
	}
	return err
}

// unpark records the items left parked when a body ended: they did not
// complete, and a replay after a restart carries on their calls and
// history, as for an item whose wait the end of the body cut short.
func (p *proc[In, R, Out]) unpark(ctx context.Context, left []job[In]) {
	for _, j := range left {
		if j.st == nil {
			continue
		}
		fl := j.st.fl
		p.nr.record(&fl, ctx, context.Cause(ctx), j.st.calls, 0)
		p.in.spent(j.t, &fl)
	}
}
