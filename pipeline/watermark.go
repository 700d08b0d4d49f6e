package pipeline

import (
	"container/heap"
	"time"
)

// pendingItems are the items of an event-time count window that the
// watermark has not passed yet, earliest first (ties in arrival order):
// a count window takes its items in the order of their time.
type pendingItems[T any] struct{ h pendingHeap[T] }

type pendingItem[T any] struct {
	env envelope[T]
	t   time.Time
	seq int64
}

type pendingHeap[T any] struct {
	items []pendingItem[T]
	seq   int64
}

func (h *pendingHeap[T]) Len() int { return len(h.items) }
func (h *pendingHeap[T]) Less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	if c := a.t.Compare(b.t); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}
func (h *pendingHeap[T]) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pendingHeap[T]) Push(x any)    { h.items = append(h.items, x.(pendingItem[T])) }
func (h *pendingHeap[T]) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items[n] = pendingItem[T]{}
	h.items = h.items[:n]
	return x
}

func (p *pendingItems[T]) len() int { return len(p.h.items) }

func (p *pendingItems[T]) push(env envelope[T], t time.Time) {
	p.h.seq++
	heap.Push(&p.h, pendingItem[T]{env: env, t: t, seq: p.h.seq})
}

// first is the earliest pending item's time; there must be one.
func (p *pendingItems[T]) first() time.Time { return p.h.items[0].t }

func (p *pendingItems[T]) pop() (envelope[T], time.Time) {
	it := heap.Pop(&p.h).(pendingItem[T])
	return it.env, it.t
}
