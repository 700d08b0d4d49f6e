package idempotency

import (
	"container/heap"
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/resilience"
)

// ErrFull is returned by [Memory.Claim] when the store holds its maximum of
// keys, all of them live claims: nothing can be evicted without letting a
// key be written twice.
var ErrFull = errors.New("idempotency: memory store is full of live claims")

// DefaultMaxKeys is how many keys a [Memory] store holds unless
// [WithMaxKeys] says otherwise.
const DefaultMaxKeys = 100_000

// A Memory store keeps claims and completed keys in the memory of one
// process. It is safe for concurrent use, but it protects only the guards
// of this process and forgets everything when the process ends: use it for
// tests and for a single consumer whose source does not redeliver across
// restarts; use a shared store (sqlstore, redisstore) otherwise.
//
// It is bounded: a new key that finds it full first evicts claims whose
// lease ran out, then the completed key that completed first (a duplicate
// of that key would then be written again), and fails with [ErrFull] when
// every key is a live claim. An evicted claim stays its owner's, as the
// [Store] contract says of a claim whose lease ran out: until another
// owner claims the key, its owner's Complete completes it (the store
// remembers the owners of at most as many evicted claims as it holds keys;
// past that, the oldest such owner's Complete fails with [ErrLostClaim]). A completed key older than the retention
// counts as never seen, and is dropped as new claims come in. Each key
// costs about 200 bytes besides its own length.
//
// The zero Memory is an empty store with the default bounds, ready to use.
type Memory struct {
	maxKeys   int           // 0: DefaultMaxKeys
	retention time.Duration // 0: DefaultRetention

	mu        sync.Mutex
	keys      map[string]*memEntry // made by the first Claim
	completed list.List            // of *memEntry, in the order they completed
	claims    claimHeap            // the claims, the soonest lease end first
	// lapsed holds, by key, the claims evict dropped with their lease run
	// out and no one has claimed since, so that their owner's Complete
	// still completes: each an element of lapsedOrder, oldest first, which
	// bounds them.
	lapsed      map[string]*list.Element
	lapsedOrder list.List // of lapsedKey
}

// lapsedKey is an element of Memory.lapsedOrder: a key, and the owner
// whose claim of it was evicted.
type lapsedKey struct{ key, owner string }

type memEntry struct {
	key   string
	owner string
	state State     // Claimed or Completed
	until time.Time // Claimed: the end of the lease
	done  time.Time // Completed: when
	elem  *list.Element
	index int // in claims, while Claimed
}

// A MemoryOption configures a [Memory] store.
type MemoryOption func(*Memory)

// WithMaxKeys sets how many keys, claimed or completed, the store holds at
// most (default [DefaultMaxKeys]). It must be at least 1.
func WithMaxKeys(n int) MemoryOption {
	return func(m *Memory) {
		if n < 1 {
			panic(fmt.Sprintf("sluice: idempotency.NewMemory: WithMaxKeys(%d): must be at least 1", n))
		}
		m.maxKeys = n
	}
}

// WithRetention sets how long a completed key is kept (default
// [DefaultRetention]); after that a duplicate of it is written again. It
// must be more than 0.
func WithRetention(d time.Duration) MemoryOption {
	return func(m *Memory) {
		if d <= 0 {
			panic(fmt.Sprintf("sluice: idempotency.NewMemory: WithRetention(%v): must be more than 0", d))
		}
		m.retention = d
	}
}

// NewMemory returns an empty Memory store. It panics, naming the option,
// when an option is invalid.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	return m
}

// Claim implements [Store.Claim]. It returns an error matching [ErrFull]
// when key is new and the store is full of live claims, marked with
// [resilience.MarkBlameless] (no key makes the store full) and not
// transient (the bound is too small).
func (m *Memory) Claim(ctx context.Context, key, owner string, now time.Time, lease time.Duration) (State, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = make(map[string]*memEntry)
	}
	m.dropExpired(now)
	e, ok := m.keys[key]
	switch {
	case !ok:
		if len(m.keys) >= m.max() && !m.evict(now) {
			// No key makes the store full: not the item's fault.
			return 0, resilience.MarkBlameless(fmt.Errorf("%w (max keys %d)", ErrFull, m.max()))
		}
		e = &memEntry{key: key}
		m.keys[key] = e
		m.unlapse(key) // claimed again: an earlier owner lost it
	case e.state == Completed:
		if now.Before(e.done.Add(m.keep())) {
			return Completed, nil
		}
		m.completed.Remove(e.elem)
		e.elem = nil
	case e.owner != owner && now.Before(e.until):
		return Busy, nil
	default: // a claim of the same owner, or one whose lease ran out
		e.owner, e.until = owner, now.Add(lease)
		heap.Fix(&m.claims, e.index)
		return Claimed, nil
	}
	e.owner, e.state, e.until, e.done = owner, Claimed, now.Add(lease), time.Time{}
	heap.Push(&m.claims, e)
	return Claimed, nil
}

// Complete implements [Store.Complete].
func (m *Memory) Complete(ctx context.Context, key, owner string, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok {
		return m.completeLapsed(key, owner, now)
	}
	if e.owner != owner {
		return ErrLostClaim
	}
	if e.state == Completed {
		return nil
	}
	heap.Remove(&m.claims, e.index)
	e.state, e.done, e.until = Completed, now, time.Time{}
	e.elem = m.completed.PushBack(e)
	return nil
}

// completeLapsed completes key for owner when evict dropped owner's claim
// of it and no one claimed it since: the claim was still owner's.
func (m *Memory) completeLapsed(key, owner string, now time.Time) error {
	if e, ok := m.lapsed[key]; !ok || e.Value.(lapsedKey).owner != owner {
		return ErrLostClaim
	}
	m.unlapse(key)
	if len(m.keys) >= m.max() && !m.evict(now) {
		// Full of live claims: the write was owner's, but the store
		// cannot keep its key, as if the key had been evicted after it
		// completed.
		return nil
	}
	e := &memEntry{key: key, owner: owner, state: Completed, done: now}
	e.elem = m.completed.PushBack(e)
	m.keys[key] = e
	return nil
}

// Release implements [Store.Release].
func (m *Memory) Release(ctx context.Context, key, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.keys[key]; ok && e.state == Claimed && e.owner == owner {
		heap.Remove(&m.claims, e.index)
		delete(m.keys, key)
	}
	if e, ok := m.lapsed[key]; ok && e.Value.(lapsedKey).owner == owner {
		m.unlapse(key)
	}
	return nil
}

// Len returns how many keys the store holds, claimed or completed,
// including completed keys past their retention that were not dropped yet.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// dropExpired drops the completed keys past their retention, oldest first.
// Keys complete in about the order of their times, so it stops at the
// first one still kept.
func (m *Memory) dropExpired(now time.Time) {
	for f := m.completed.Front(); f != nil; f = m.completed.Front() {
		e := f.Value.(*memEntry)
		if now.Before(e.done.Add(m.keep())) {
			return
		}
		m.completed.Remove(f)
		delete(m.keys, e.key)
	}
}

// evict makes room for one key and reports whether it could: it drops the
// claims whose lease ran out, else the completed key that completed first.
func (m *Memory) evict(now time.Time) bool {
	for len(m.claims) > 0 && !now.Before(m.claims[0].until) {
		e := heap.Pop(&m.claims).(*memEntry)
		delete(m.keys, e.key)
		m.lapse(e.key, e.owner)
	}
	if len(m.keys) < m.max() {
		return true
	}
	f := m.completed.Front()
	if f == nil {
		return false
	}
	m.completed.Remove(f)
	delete(m.keys, f.Value.(*memEntry).key)
	return true
}

// lapse remembers that owner's claim of key was evicted, forgetting the
// oldest such owners past max.
func (m *Memory) lapse(key, owner string) {
	if m.lapsed == nil {
		m.lapsed = make(map[string]*list.Element)
	}
	m.unlapse(key)
	m.lapsed[key] = m.lapsedOrder.PushBack(lapsedKey{key, owner})
	for m.lapsedOrder.Len() > m.max() {
		m.unlapse(m.lapsedOrder.Front().Value.(lapsedKey).key)
	}
}

// unlapse forgets the evicted claim of key, if any.
func (m *Memory) unlapse(key string) {
	if e, ok := m.lapsed[key]; ok {
		m.lapsedOrder.Remove(e)
		delete(m.lapsed, key)
	}
}

// max returns the most keys the store holds.
func (m *Memory) max() int {
	if m.maxKeys == 0 {
		return DefaultMaxKeys
	}
	return m.maxKeys
}

// keep returns the retention of completed keys.
func (m *Memory) keep() time.Duration {
	if m.retention == 0 {
		return DefaultRetention
	}
	return m.retention
}

// claimHeap orders claims by the end of their lease, for [heap].
type claimHeap []*memEntry

func (h claimHeap) Len() int           { return len(h) }
func (h claimHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h claimHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *claimHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *claimHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

var _ Store = (*Memory)(nil)
