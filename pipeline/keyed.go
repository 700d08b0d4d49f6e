package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"

	"github.com/sluicehq/sluice/resilience"
)

// Keyed runs the node on n workers with per-key order: items whose key
// (key's result) is the same are handled one at a time, in the order they
// arrived, and handed downstream in that order; items of other keys go on
// meanwhile, on the other workers. An item that layer 1 is retrying holds
// back only the items of its own key: while it waits, it parks (see
// [MaxParked]), holding no worker, and its worker hands the rest of its
// work to the others. A node restart replays each key's unfinished items
// in their order.
//
// Items of different keys leave in no set order. The items waiting inside
// the node, behind their keys or for a worker, are bounded by the node's
// buffer (at least 64 per worker): when one key holds that many back, the
// node stops reading until it moves on. Under node restart the replay
// window bounds them too: a retrying item is the window's checkpoint, so
// after MaxReplayWindow later items the node stops reading until it ends.
// A Keyed node never hands a wait over to its source's broker
// ([deadletter.HandOffSource]): a handed-off item would come back behind its key's
// later items, so it waits in process.
//
// key is called once per item the node reads (again for an item a restart
// replays), on one goroutine; it must not block. A panic in key fails that
// item, which goes to the node's failure action. Keys that are not equal
// to themselves (a float NaN) share one order.
//
// Keyed is for transforms, sinks, filters and flat maps, in place of
// [Parallel] and [Unordered]: giving either with it is a Build error, as is
// a key function whose input is not the node's. Keyed(1, key) has one
// worker, and still calls key.
func Keyed[In any, K comparable](n int, key func(In) K) NodeOption {
	return func(c *nodeConfig) {
		c.parallel, c.keyedN = n, n
		if key == nil {
			c.keyed = errNilKey
			return
		}
		c.keyed = keyFunc[In, K](key)
	}
}

var errNilKey = errors.New("Keyed: the key function is nil")

// A keyFunc is the key of a Keyed node; a laneMaker for its input type.
type keyFunc[In any, K comparable] func(In) K

// A laneMaker makes the table of a Keyed node's keys for one run.
type laneMaker[In any] interface {
	lanes(bound int) laneMap[In]
	describe() string
}

func (f keyFunc[In, K]) lanes(bound int) laneMap[In] {
	return &laneMapOf[In, K]{key: f, bound: bound, m: make(map[K]*lane[In])}
}

func (f keyFunc[In, K]) describe() string { return reflect.TypeFor[func(In) K]().String() }

// keyedCheck returns the Build errors of a node's Keyed option; In is the
// node's input type.
func keyedCheck[In any](c nodeConfig) []error {
	switch k := c.keyed.(type) {
	case nil:
		return nil
	case error:
		return []error{k}
	case laneMaker[In]:
		var errs []error
		if c.parallelSet {
			errs = append(errs, fmt.Errorf("Keyed(%d) and Parallel: Keyed sets the workers; leave Parallel out", c.keyedN))
		}
		if c.unordered {
			errs = append(errs, fmt.Errorf("Keyed(%d) and Unordered: a Keyed node keeps each key's order and no other; leave Unordered out", c.keyedN))
		}
		return errs
	default:
		var want func(In)
		return []error{fmt.Errorf("Keyed: the key function takes the node's input, %s, not %s",
			reflect.TypeOf(want).In(0), k.(interface{ describe() string }).describe())}
	}
}

// A lane is the order of one key: its items waiting behind the one being
// handled. A lane is busy from the arrival of an item of its key until its
// last item left the node (was handed over, or ended), and held by one
// item at a time meanwhile. An idle lane stays in the table, so that a key
// seen again costs no insertion, until the table grows past its bound.
type lane[In any] struct {
	busy bool
	q    []job[In] // waiting, oldest first from head
	head int
}

func (l *lane[In]) pop() (job[In], bool) {
	if l.head == len(l.q) {
		return job[In]{}, false
	}
	j := l.q[l.head]
	l.q[l.head] = job[In]{}
	l.head++
	if l.head == len(l.q) {
		l.q, l.head = l.q[:0], 0
	}
	return j, true
}

// A laneMap finds the lane of an item's key. Its methods are called with
// the keyed run's lock held.
type laneMap[In any] interface {
	// find returns the lane of v's key; free reports that it was idle
	// (or new), and is busy now. A panic in the key function, or a key
	// that cannot be compared, is returned as err.
	find(v In) (l *lane[In], free bool, err error)
	// idle records that l's last item left.
	idle(l *lane[In])
}

type laneMapOf[In any, K comparable] struct {
	key   func(In) K
	m     map[K]*lane[In]
	nan   *lane[In] // the lane of the keys not equal to themselves
	bound int       // the most lanes kept before the idle ones go
	spare []*lane[In]
}

func (t *laneMapOf[In, K]) find(v In) (l *lane[In], free bool, err error) {
	k, err := t.keyOf(v)
	if err != nil {
		return nil, false, err
	}
	l, nan, ok, err := t.lookup(k)
	switch {
	case err != nil:
		return nil, false, err
	case nan:
		if t.nan == nil {
			t.nan = t.fresh()
		}
		l = t.nan
	case !ok:
		if len(t.m) >= t.bound {
			t.sweep()
		}
		l = t.fresh()
		t.m[k] = l
	}
	free = !l.busy
	l.busy = true
	return l, free, nil
}

// keyOf calls the key function under the panic guard.
func (t *laneMapOf[In, K]) keyOf(v In) (k K, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Keyed: the key function panicked: %w", &resilience.PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	return t.key(v), nil
}

// lookup finds k's lane, or reports that k is not equal to itself (a
// NaN, never found in a map); a key whose dynamic type cannot be compared
// (a slice in an interface) is an error.
func (t *laneMapOf[In, K]) lookup(k K) (l *lane[In], nan, ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Keyed: the key %v (%T) cannot be compared: %v", any(k), any(k), r)
		}
	}()
	if k != k {
		return nil, true, false, nil
	}
	l, ok = t.m[k]
	return l, false, ok, nil
}

func (t *laneMapOf[In, K]) fresh() *lane[In] {
	if n := len(t.spare); n > 0 {
		l := t.spare[n-1]
		t.spare = t.spare[:n-1]
		return l
	}
	return &lane[In]{}
}

func (t *laneMapOf[In, K]) idle(l *lane[In]) {
	l.busy = false
	if cap(l.q) > 64 {
		l.q = nil // a burst of one key is not kept
	}
}

// sweep drops the idle lanes, keeping a few for new keys: busy lanes are
// at most the items inside the node, so that at most half the bound is
// busy and a sweep costs its share of the insertions since the last.
func (t *laneMapOf[In, K]) sweep() {
	for k, l := range t.m {
		if !l.busy {
			delete(t.m, k)
			if len(t.spare) < t.bound/2 {
				t.spare = append(t.spare, l)
			}
		}
	}
}

// A kjob is an item of a Keyed node with the lane it holds.
type kjob[In any] struct {
	job[In]
	l *lane[In]
}

// A keyedRun is the shared state of a Keyed node's body: its dealer reads
// the input and puts each item behind its key, or, when its key is free,
// on ready, where the workers take it. A worker that finished an item of a
// lane takes the lane's next item itself; when there is none, it keeps the
// lane until its writer handed the item over, so that a later item of the
// key, taken by another worker, cannot overtake it downstream.
type keyedRun[In any] struct {
	mu     sync.Mutex
	lanes  laneMap[In]
	inside int // items read and not yet ended: waiting, ready or being handled
	limit  int
	ended  bool // the input ended
	closed bool // ready is closed
	// waiting is set while the dealer waits for inside to fall below
	// limit; a worker then signals room.
	waiting bool
	room    chan struct{}
	// ready holds the items that hold their lanes and wait for a worker.
	// Every item in it counts in inside, which never exceeds limit, so
	// that sending to it never waits.
	ready chan []kjob[In]
	// parked are the items whose retry waits; each holds its lane.
	parked *parking[kjob[In]]
}

// drop ends a lane whose last item left; mu is held.
func (k *keyedRun[In]) drop(l *lane[In]) { k.lanes.idle(l) }

// wake wakes the dealer when items ended and it waits for room, and closes
// ready after the last item; mu is held.
func (k *keyedRun[In]) wake() {
	if k.waiting && k.inside < k.limit {
		k.waiting = false
		k.room <- struct{}{}
	}
	k.closeIfDone()
}

func (k *keyedRun[In]) closeIfDone() {
	if k.ended && k.inside == 0 && !k.closed {
		k.closed = true
		close(k.ready)
	}
}

// keyed runs a Keyed node's body: a dealer and n workers.
func (p *proc[In, R, Out]) keyed(ctx context.Context) error {
	// After a restart, what the workers of the failed body gathered goes
	// first: a replayed item of a key must not overtake it.
	for _, w := range p.writers {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	n := p.nr.spec.cfg.parallel
	limit := max(p.buffer(), n*maxChunk*minDepth)
	k := &keyedRun[In]{
		limit: limit,
		room:  make(chan struct{}, 1),
		ready: make(chan []kjob[In], limit),
	}
	// Busy lanes are at most limit: a bound of twice that, and at least
	// a few thousand keys, keeps a sweep rare.
	k.lanes = p.nr.spec.cfg.keyed.(laneMaker[In]).lanes(max(2*limit, 4096))
	g, gctx := newCrew(ctx)
	defer p.nr.group(gctx)()
	// A parked item holds its lane and counts in inside: when it wakes,
	// it goes on ready, which has room for every item inside.
	k.parked = newParking(p.nr.rs.p.cfg.clock, p.nr.spec.cfg.maxParkedOr(), func(kj kjob[In]) {
		k.ready <- []kjob[In]{kj}
	})
	free := make(chan []kjob[In], limit)
	g.Go(func() error { return p.keyedDeal(gctx, k, free) })
	for w := range n {
		g.Go(func() error { return p.keyedWork(ctx, gctx, k, w, free) })
	}
	err := g.Wait()
	left := k.parked.close()
	jobs := make([]job[In], len(left))
	for i, kj := range left {
		jobs[i] = kj.job
	}
	// Woken items that no worker took wait on ready: they carry their
	// calls so far, as parked ones do. close ran first, so no wake feeds
	// ready any more.
drain:
	for {
		select {
		case c, ok := <-k.ready:
			if !ok {
				break drain
			}
			for _, kj := range c {
				if kj.st != nil {
					jobs = append(jobs, kj.job)
				}
			}
		default:
			break drain
		}
	}
	p.unpark(gctx, jobs)
	return err
}

// keyedDeal reads the input and admits each item: behind its key, or on
// ready when its key is free.
func (p *proc[In, R, Out]) keyedDeal(ctx context.Context, k *keyedRun[In], free chan []kjob[In]) error {
	n := p.nr.spec.cfg.parallel
	var one [1]envelope[In]
	// all gathers the items of a run whose lanes were free, which go to
	// ready; it is reused from run to run.
	var all []kjob[In]
	for {
		var items []envelope[In]
		var t ticket
		if p.in.windowed {
			env, tk, ok, err := p.in.next(ctx)
			if err != nil || !ok {
				return p.keyedEnd(k, err)
			}
			one[0], t, items = env, tk, one[:]
		} else {
			run, ok, err := p.in.r.nextRun(ctx)
			if err != nil || !ok {
				return p.keyedEnd(k, err)
			}
			p.in.took = true
			items = run
		}
		c := all[:0]
		k.mu.Lock()
		for _, env := range items {
			for k.inside >= k.limit {
				k.waiting = true
				k.mu.Unlock()
				deal(k.ready, c, n, free)
				c = c[:0]
				p.in.r.n.flush()
				select {
				case <-k.room:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				k.mu.Lock()
			}
			l, made, kerr := k.lanes.find(env.val)
			if kerr != nil {
				k.mu.Unlock()
				if err := p.keyFailed(ctx, env, t, kerr); err != nil {
					return err
				}
				k.mu.Lock()
				continue
			}
			k.inside++
			j := job[In]{env: env, t: t}
			if !made {
				l.q = append(l.q, j)
				continue
			}
			c = append(c, kjob[In]{j, l})
		}
		k.mu.Unlock()
		deal(k.ready, c, n, free)
		all = c[:0]
	}
}

// deal puts c, the items of a run whose lanes were free, on ready in
// chunks: as many as there are workers, n, when there are enough items,
// of at most maxChunk items each. The chunks are counted from the items
// that go to ready, not from the run: items of a run whose keys repeat
// (the records of a few partitions, in one burst of a broker source) wait
// in their lanes, and the few that go to ready must not share a chunk
// while workers idle, as an item that takes long holds the rest of its
// chunk. Each chunk is a slice of its own from free, as a worker gathers
// into the chunk it was given; c is cleared.
func deal[J any](ready chan []J, c []J, n int, free chan []J) {
	if len(c) == 0 {
		return
	}
	// Rounded down: a chunk of two keys where a worker would be left
	// with none would hold the second behind a slow first.
	size := min(max(len(c)/n, 1), maxChunk)
	for rest := c; len(rest) > 0; {
		k := min(size, len(rest))
		ready <- append(take(free), rest[:k]...)
		rest = rest[k:]
	}
	clear(c)
}

// keyedEnd ends the dealer: at the end of input, ready closes once the
// last item inside ended.
func (p *proc[In, R, Out]) keyedEnd(k *keyedRun[In], err error) error {
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.ended = true
	k.closeIfDone()
	k.mu.Unlock()
	return nil
}

// keyFailed ends an item whose key could not be computed: it goes to the
// node's failure action.
func (p *proc[In, R, Out]) keyFailed(ctx context.Context, env envelope[In], t ticket, kerr error) error {
	fl := p.nr.failed(ctx, kerr)
	if err := p.nr.itemFailed(ctx, env.val, env.tr, fl); err != nil {
		p.in.spent(t, fl)
		return err
	}
	p.in.ack(t)
	return nil
}

// A keyedWorker is one worker of a Keyed node. It handles a chunk of items
// from ready, then, under one lock, ends them: a lane with an item waiting
// gives it to the worker's next chunk, a lane without keeps its hold.
type keyedWorker[In, R, Out any] struct {
	p    *proc[In, R, Out]
	k    *keyedRun[In]
	out  *writer[Out]
	done tally
	// held are the lanes whose last item this worker handed to its
	// writer, which has not sent it yet.
	held []*lane[In]
	// cur is the chunk the worker is at, i the item it is handling; the
	// items before from have ended.
	cur      []kjob[In]
	i, from  int
	next     []kjob[In] // the lanes' waiting items, for after cur
	tick     uint
	pushback []kjob[In]
	// owed is set when a held lane has items waiting: they wait for the
	// worker's writer, which must hand over soon, even if the worker's
	// own items give it nothing more to send.
	owed bool
}

func (p *proc[In, R, Out]) keyedWork(ctx, gctx context.Context, k *keyedRun[In], w int, free chan []kjob[In]) error {
	kw := &keyedWorker[In, R, Out]{p: p, k: k, out: p.writer(w), done: tally{dst: &p.nr.spec.stats.out}}
	defer kw.done.flush()
	flush := p.idle(kw.out, &kw.done, false)
	idle := func(ctx context.Context) error {
		// Layer 1 is about to wait on the item at cur[i]: once what the
		// worker gathered is handed over, only its own key waits with it.
		if err := flush(ctx); err != nil {
			return err
		}
		kw.end(kw.i, true)
		kw.release()
		if rest := kw.cur[kw.i+1:]; len(rest) > 0 {
			k.ready <- append([]kjob[In](nil), rest...)
			clear(rest)
			kw.cur = kw.cur[:kw.i+1]
		}
		return nil
	}
	for {
		if len(kw.held) > 0 || (kw.out != nil && kw.out.pending()) {
			if err := flush(gctx); err != nil {
				return err
			}
			kw.release()
		}
		kw.done.flush()
		c, ok, err := recv[[]kjob[In], Out](gctx, k.ready, nil, nil)
		if err != nil || !ok {
			return err
		}
		for len(c) > 0 {
			kw.cur, kw.from = c, 0
			for kw.i = 0; kw.i < len(kw.cur); kw.i++ {
				if err := kw.handle(ctx, gctx, kw.cur[kw.i].job, idle); err != nil {
					return err
				}
			}
			kw.end(len(kw.cur), false)
			// The lanes' waiting items are the next chunk; cur's slice
			// gathers the round after.
			spent := kw.cur
			clear(spent)
			c, kw.next, kw.cur = kw.next, spent[:0], nil
			if kw.owed {
				if err := flush(gctx); err != nil {
					return err
				}
			}
			if len(kw.held) > 0 && !kw.out.pending() {
				kw.release()
			}
		}
		if cap(c) > 0 {
			give(free, c)
		}
	}
}

// handle takes one item through layer 1 and hands its result over.
func (kw *keyedWorker[In, R, Out]) handle(ctx, gctx context.Context, j job[In], idle idleFunc) error {
	p := kw.p
	if kw.tick++; kw.tick%stopEvery == 0 {
		if err := p.stopping(gctx); err != nil {
			return err
		}
	}
	r, deliver, st, err := p.handle(gctx, j.env, j.t, idle, j.st, true)
	if err != nil {
		return err
	}
	if st != nil {
		// idle ran: the items before this one ended and those after it
		// went back to ready. It leaves the chunk, keeping its lane, and
		// parks until its wait ends.
		kj := kw.cur[kw.i]
		kw.cur[kw.i] = kjob[In]{}
		kw.cur = kw.cur[:kw.i]
		kj.st = st
		if err := kw.k.parked.park(gctx, kj, st.until, &st.late); err != nil {
			p.unpark(gctx, []job[In]{kj.job})
			return err
		}
		return nil
	}
	if deliver {
		if err := p.deliver(ctx, kw.out, &kw.done, j.env, r); err != nil { // see ordered
			return err
		}
		p.in.ack(j.t)
	}
	return nil
}

// end records that the items of cur from kw.from to upto ended. The next
// item of each of their lanes joins kw.next, or, when the worker is about
// to wait (away), goes back to ready for another worker: what the worker
// gathered was handed over first. A lane with no item waiting is held
// until the worker's writer sent its last item.
func (kw *keyedWorker[In, R, Out]) end(upto int, away bool) {
	if kw.from >= upto {
		return
	}
	k := kw.k
	k.mu.Lock()
	for _, kj := range kw.cur[kw.from:upto] {
		l := kj.l
		k.inside--
		switch next, ok := l.pop(); {
		case ok && away:
			kw.pushback = append(kw.pushback, kjob[In]{next, l})
		case ok:
			kw.next = append(kw.next, kjob[In]{next, l})
		case kw.out == nil || !kw.out.pending():
			k.drop(l)
		default:
			kw.held = append(kw.held, l)
		}
	}
	kw.owed = false
	for _, l := range kw.held {
		if l.head < len(l.q) {
			kw.owed = true
			break
		}
	}
	k.wake()
	k.mu.Unlock()
	kw.from = upto
	kw.sendBack()
}

// release gives up the lanes the worker held until its writer sent their
// items: a lane with items waiting goes back to ready with the first.
func (kw *keyedWorker[In, R, Out]) release() {
	if len(kw.held) == 0 {
		return
	}
	kw.k.mu.Lock()
	for _, l := range kw.held {
		if j, ok := l.pop(); ok {
			kw.pushback = append(kw.pushback, kjob[In]{j, l})
		} else {
			kw.k.drop(l)
		}
	}
	kw.k.mu.Unlock()
	clear(kw.held)
	kw.held, kw.owed = kw.held[:0], false
	kw.sendBack()
}

// sendBack puts the items gathered in pushback on ready.
func (kw *keyedWorker[In, R, Out]) sendBack() {
	if len(kw.pushback) > 0 {
		kw.k.ready <- append([]kjob[In](nil), kw.pushback...)
		clear(kw.pushback)
		kw.pushback = kw.pushback[:0]
	}
}
