package pipeline

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// A tracker follows one tracked item and everything derived from it. refs
// counts the parts still on their way (broadcast branches, FlatMap and
// Unbatch children); each part that reaches a terminal outcome calls finish
// once, and the last one fires the tracker with the combined outcome.
//
// A root tracker belongs to an item given to EmitTracked and calls the
// user's done. A group tracker belongs to a batch built from tracked items
// and finishes each of its parents with the batch's outcome; when an
// Unbatch hands a batch of as many items on item by item again, each item
// gets back its own parent instead, by position, so that its done reports
// its own fate. Items that a FlatMap makes of a batch may be reordered or
// new: they share the batch's tracker, and its parents the batch's fate.
type tracker struct {
	refs    atomic.Int64
	outcome atomic.Int32
	fired   atomic.Bool
	// flag is, on a root, that the item failed the run (its outcome then
	// is Rejected: see blame); on a group, that a node's function took the
	// batch's value, which may then no longer hold its items in their
	// order (see reshape).
	flag   atomic.Bool
	window bool // group only: of an Aggregate window, whose value is not its items
	// quiet marks a root that only carries a key: the item is not tracked
	// (nobody waits for its outcome), so it is handed over in batches as
	// untracked items are, and the run's end does not report it.
	quiet bool
	// linked says a live root tracker is in its registry, guarded by the
	// registry's mu.
	linked bool
	// mark is the state of a root in its ledger, guarded by led.mu.
	mark uint8
	done finisher // root only
	// of is what the roots of one source share (its name, counters,
	// registry): root only, and for a quiet tracker its source.
	of      *rootOf
	parents []*tracker // group only: by position in the batch, nil for an untracked item
	// prev and next link a live root tracker into its registry, guarded
	// by the registry's mu.
	prev, next *tracker
	// led is the ledger of the source of an item emitted with EmitAt in
	// a run with checkpoints, else nil; idx is the item's index in it, in
	// emission order from 1. Root only.
	led *ledger
	idx uint64
	// extra holds what most tracked items never need, allocated with
	// the tracker only when one is (see extra); nil otherwise. A named
	// field, not an embedded one, so that no use of its fields can forget
	// that it may be nil.
	extra *extra
}

// An extra holds the fields of a tracker that most never need: a
// Kafka record's tracker, say, is allocated per record, and is smaller
// without them. A tracker that needs one is allocated together with it
// (trackerWith, rootedWith); a tracker without has extra nil, which
// every reader checks.
type extra struct {
	ho *handOffState // root only: nil unless its item can be handed off
	// key is the item's correlation key (SourceKey), root only.
	key string
	// trace is the item's trace headers (SourceTraceHeaders), root only.
	trace map[string]string
	// pos is the position of an item emitted with EmitAt, root only;
	// positioned says it was.
	pos        []byte
	positioned bool
	// settled, on a window's group tracker, records the window in its
	// node's window log once its output settled, before its items settle.
	settled func()
}

// A trackerWith is a tracker allocated with its extra.
type trackerWith struct {
	tracker
	x extra
}

// newTrackerWith returns a tracker that has its extra.
func newTrackerWith() *tracker {
	w := &trackerWith{}
	w.extra = &w.x
	return &w.tracker
}

// A rootOf is what the root trackers of one source share, kept once
// rather than in each.
type rootOf struct {
	src   string    // the source's name
	stats *counters // the source's, whose settled a root's fate adds to; nil for the ledger's own
	reg   *registry
	// rejOf returns the item as a RejectedItem (nil when it is not one);
	// nil when the item's type can never be one. The item is kept in the
	// allocation of the tracker (a rooted), so that it is made an
	// interface only for the rare item that failed the run.
	rejOf func(*tracker) deadletter.RejectedItem
}

// rootKey returns the correlation key of root t.
func (t *tracker) rootKey() string {
	if t.extra == nil {
		return ""
	}
	return t.extra.key
}

// links returns the trace headers of t's item: a root's, or for a group
// those of each item it holds that has some.
func (t *tracker) links() []map[string]string {
	switch {
	case t == nil:
		return nil
	case t.parents == nil:
		if t.extra == nil || t.extra.trace == nil {
			return nil
		}
		return []map[string]string{t.extra.trace}
	}
	var ls []map[string]string
	for _, p := range t.parents {
		ls = append(ls, p.links()...)
	}
	return ls
}

// keyOf returns the correlation key of t's item: a root's key; for a
// group (a batch, a window, a joined pair), its first keyed item's, with
// how many items more it holds.
func (t *tracker) keyOf() string {
	switch {
	case t == nil:
		return ""
	case t.parents == nil:
		return t.rootKey()
	}
	first, n := t.leaves()
	if first != "" && n > 1 {
		return fmt.Sprintf("%s and %d more", first, n-1)
	}
	return first
}

// leaves returns the first key of a group's items and how many items it
// holds, counting the items of a batch of batches, not the batches.
func (t *tracker) leaves() (first string, n int) {
	for _, p := range t.parents {
		switch {
		case p == nil:
			n++
		case p.parents == nil:
			if first == "" {
				first = p.rootKey()
			}
			n++
		default:
			k, m := p.leaves()
			if first == "" {
				first = k
			}
			n += m
		}
	}
	return first, n
}

func (t *tracker) add(n int) {
	if t.extra != nil && t.extra.ho != nil {
		t.extra.ho.split.Store(true)
	}
	t.refs.Add(int64(n))
}

// finish records that one part ended in o.
func (t *tracker) finish(o node.Outcome) {
	for {
		cur := node.Outcome(t.outcome.Load())
		next := cur.Combine(o)
		if next == cur || t.outcome.CompareAndSwap(int32(cur), int32(next)) {
			break
		}
	}
	if t.refs.Add(-1) == 0 {
		t.fire(node.Outcome(t.outcome.Load()))
	}
}

// blame records that the item failed its node under the Fail action: if
// the run then ends with the item unsettled, its outcome is Rejected, not
// Failed. A batch blames its item only when it holds one: the items of a
// larger batch may be innocent neighbours of the one that failed it, and
// would otherwise be blamed with it every time.
func (t *tracker) blame() {
	switch {
	case t == nil:
	case t.done != nil:
		t.flag.Store(true)
	case len(t.parents) == 1:
		t.parents[0].blame()
	}
}

// unblame forgets a blame once a node restart took the item up again: a
// failure it got over does not make it Rejected in a run that another item
// failed.
func (t *tracker) unblame() {
	switch {
	case t == nil:
	case t.done != nil:
		t.flag.Store(false)
	case len(t.parents) == 1:
		t.parents[0].unblame()
	}
}

// takesBack reports whether every item t holds has a source that delivers
// it again when it ends Failed (a tracked root, not a quiet one).
func (t *tracker) takesBack() bool {
	switch {
	case t == nil:
		return false
	case t.done != nil:
		return !t.quiet
	case len(t.parents) == 0 || t.window:
		return false
	}
	for _, p := range t.parents {
		if !p.takesBack() {
			return false
		}
	}
	return true
}

// release records that one part ended without an outcome of its own: a
// batch whose items were handed on with their own trackers.
func (t *tracker) release() { t.finish(0) }

// fire ends the tracker with o, once, whatever its parts still do.
func (t *tracker) fire(o node.Outcome) {
	if !t.fired.CompareAndSwap(false, true) {
		return
	}
	if t.done != nil {
		if o == 0 {
			o = node.Failed // no part reported an outcome: never claim one
		}
		if o == node.Failed && t.flag.Load() {
			o = node.Rejected
		}
		t.of.reg.remove(t)
		if t.led != nil {
			t.led.settle(t, o)
			return
		}
		if t.of.stats != nil {
			t.of.stats.settled.Add(1)
		}
		t.of.reg.call(t.of.src, t.done, o)
		return
	}
	if t.extra != nil && t.extra.settled != nil && settles(o) {
		t.extra.settled()
	}
	for _, p := range t.parents {
		if p != nil { // an untracked item of the batch, window or pair
			p.finish(o)
		}
	}
}

// A finisher is told the outcome of a tracked item once, as
// EmitTracked's done is. A source that keeps a value per item anyway (a
// broker's delivery) gives that value with EmitTrackedWith, so that no
// closure is made per item; a done func is a doneFunc.
type finisher interface{ Done(node.Outcome) }

// A doneFunc is EmitTracked's done as a finisher: a func is one word, so
// making it an interface allocates nothing.
type doneFunc func(node.Outcome)

// Done calls f.
func (f doneFunc) Done(o node.Outcome) { f(o) }

// A registry holds the live root trackers of a run, so that the run can
// fire every one it did not finish with Failed when it ends. They form a
// list linked through the trackers themselves: adding and removing one
// costs a lock and a few pointers, no hashing and no allocation.
type registry struct {
	mu    sync.Mutex
	head  *tracker
	n     int
	panic func(src string, err error) // reports a panic of a user's done callback
}

func newRegistry(onPanic func(src string, err error)) *registry {
	return &registry{panic: onPanic}
}

// adopt makes t, new, a live root tracker of a source whose roots share
// of, and returns it. of.reg is r.
func (r *registry) adopt(t *tracker, of *rootOf, done finisher) *tracker {
	t.done, t.of = done, of
	t.refs.Store(1)
	r.mu.Lock()
	t.next, t.linked = r.head, true
	if r.head != nil {
		r.head.prev = t
	}
	r.head = t
	r.n++
	r.mu.Unlock()
	return t
}

// A rooted is a root tracker allocated together with its item, whose
// type may be a RejectedItem: one allocation instead of the tracker and
// the item made an interface.
type rooted[T any] struct {
	tracker
	item T
}

// A rootedWith is a rooted allocated with its tracker's extra.
type rootedWith[T any] struct {
	rooted[T]
	x extra
}

// rootedRejected is the rejOf of a rooted[T].
func rootedRejected[T any](t *tracker) deadletter.RejectedItem {
	// t is the first field of a rooted[T] (or of the rooted[T] first in
	// a rootedWith[T]): the tracker of every root is allocated so.
	r, _ := any((*rooted[T])(unsafe.Pointer(t)).item).(deadletter.RejectedItem)
	return r
}

// mayReject reports whether an item of type T may be a RejectedItem: its
// type is one, or is an interface whose values may be.
func mayReject[T any]() bool {
	t := reflect.TypeFor[T]()
	return t.Kind() == reflect.Interface || t.Implements(reflect.TypeFor[deadletter.RejectedItem]())
}

// rejected returns the item of root tracker t as a RejectedItem, or nil.
// When t's done is a RejectedItem it is returned instead, in the item's
// stead: root keeps no item in such a tracker, so this must be checked
// before rejOf, which reads the item from a rooted.
func (t *tracker) rejected() deadletter.RejectedItem {
	if r, ok := t.done.(deadletter.RejectedItem); ok {
		return r
	}
	if t.of == nil || t.of.rejOf == nil {
		return nil
	}
	return t.of.rejOf(t)
}

// group returns a tracker for a batch of items, or nil when none of them is
// tracked.
func group[T any](items []envelope[T]) *tracker {
	tracked := false
	for _, it := range items {
		if it.tr != nil {
			tracked = true
			break
		}
	}
	if !tracked {
		return nil
	}
	// Made with its extra: a window's tracker records itself once
	// settled.
	t := newTrackerWith()
	t.parents, t.quiet = make([]*tracker, len(items)), true
	for i, it := range items {
		t.parents[i] = it.tr
		// A group is quiet when its items only carry keys.
		t.quiet = t.quiet && (it.tr == nil || it.tr.quiet)
	}
	t.refs.Store(1)
	return t
}

// groupOf is group for a batch whose items' trackers are trs, by
// position, nil when none of them is tracked. The tracker keeps trs.
func groupOf(trs []*tracker) *tracker {
	if trs == nil {
		return nil
	}
	t := &tracker{parents: trs, quiet: true}
	for _, p := range trs {
		// A group is quiet when its items only carry keys.
		t.quiet = t.quiet && (p == nil || p.quiet)
	}
	t.refs.Store(1)
	return t
}

// ungroup returns the trackers of a batch's items, by position, when tr is
// the tracker of a batch of n items that no node's function reshaped;
// else nil. A caller that hands the
// items on with their own trackers adds a part to each first, then
// releases tr before it hands any on: a hand-over that waits, then a run
// that stops, must not keep the items already handed on from their own
// outcomes.
func (tr *tracker) ungroup(n int) []*tracker {
	if tr == nil || tr.parents == nil || len(tr.parents) != n || tr.window || tr.flag.Load() {
		return nil
	}
	return tr.parents
}

// reshape records, on the tracker of a batch, that a node's function made
// a new value of it: a Map may sort, swap or replace the items, in place
// or not, so that the value's positions no longer say whose each item is.
// An Unbatch then hands the items on sharing the batch's tracker, as a
// FlatMap does, instead of giving one item another's fate.
func (tr *tracker) reshape() {
	if tr != nil && tr.parents != nil && tr.done == nil && !tr.flag.Load() {
		tr.flag.Store(true)
	}
}

func (r *registry) remove(t *tracker) {
	r.mu.Lock()
	if t.linked {
		if t.prev != nil {
			t.prev.next = t.next
		} else {
			r.head = t.next
		}
		if t.next != nil {
			t.next.prev = t.prev
		}
		t.prev, t.next, t.linked = nil, nil, false
		r.n--
	}
	r.mu.Unlock()
}

func (r *registry) call(src string, done finisher, o node.Outcome) {
	if err := protect(func() { done.Done(o) }); err != nil {
		r.panic(src, err)
	}
}

// failAll fires every live root tracker with Failed and returns how many
// there were.
func (r *registry) failAll() int {
	r.mu.Lock()
	live := make([]*tracker, 0, r.n)
	for t := r.head; t != nil; t = t.next {
		live = append(live, t)
	}
	r.mu.Unlock()
	for _, t := range live {
		t.fire(node.Failed)
	}
	return len(live)
}
