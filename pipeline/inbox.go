package pipeline

import (
	"context"
	"sync"
)

// A ticket names an item read through an inbox: its sequence number and
// what its attempts before a restart replayed it left (nil: none).
type ticket struct {
	seq   uint64
	prior *failure
}

// An inbox is a node's input. Without a replay window it is the edge's
// reader and nothing more. With one (a parallel node under node restart)
// it also keeps the items read but not yet completed (handed downstream,
// or ended), from the checkpoint (the oldest of them) to the read head, in
// a ring that grows up to the window's size and is then reused, so that
// keeping them allocates nothing per item. After a restart the node reads
// the window's items again before new ones. A full window stops reading
// until an item completes: backpressure, never an error.
//
// next is called by one goroutine at a time; ack and spent may be called
// concurrently with it and with each other.
type inbox[T any] struct {
	r        *reader[T]
	windowed bool
	max      int
	took     bool // an item was read; read only after the readers stopped

	mu       sync.Mutex
	ring     []entry[T] // the window: n entries from head, by sequence number
	head     int
	n        int
	replayAt int    // the offset of the next entry to read again; n when not replaying
	seq      uint64 // the newest entry's sequence number
	acked    int64
	space    chan struct{} // closed when an ack frees room in a full window
}

type entry[T any] struct {
	env  envelope[T]
	seq  uint64
	done bool
	past *failure // what the item's failed attempts left, for a replay
}

// firstRing is the ring's first size; it doubles up to the window's.
const firstRing = 64

func newInbox[T any](r *reader[T], window int) *inbox[T] {
	return &inbox[T]{r: r, windowed: window > 0, max: window, space: make(chan struct{})}
}

// at returns the entry k places after the checkpoint; mu is held.
func (in *inbox[T]) at(k int) *entry[T] {
	return &in.ring[(in.head+k)%len(in.ring)]
}

// next returns the next item to process: one to replay, or a new one.
func (in *inbox[T]) next(ctx context.Context) (envelope[T], ticket, bool, error) {
	if !in.windowed {
		env, ok, err := in.r.next(ctx)
		if ok {
			in.took = true
		}
		return env, ticket{}, ok, err
	}
	in.mu.Lock()
	for in.replayAt < in.n {
		e := in.at(in.replayAt)
		in.replayAt++
		if !e.done {
			env, t := e.env, ticket{seq: e.seq, prior: e.past}
			in.mu.Unlock()
			return env, t, true, nil
		}
	}
	for in.n >= in.max {
		space := in.space
		in.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return envelope[T]{}, ticket{}, false, context.Cause(ctx)
		}
		in.mu.Lock()
	}
	in.mu.Unlock()

	env, ok, err := in.r.next(ctx)
	if !ok || err != nil {
		return env, ticket{}, ok, err
	}
	in.took = true
	in.mu.Lock()
	if in.n == len(in.ring) {
		in.grow()
	}
	in.seq++
	*in.at(in.n) = entry[T]{env: env, seq: in.seq}
	in.n++
	in.replayAt = in.n
	t := ticket{seq: in.seq}
	in.mu.Unlock()
	return env, t, true, nil
}

// grow doubles the ring, up to the window's size, keeping the entries in
// order from index 0; mu is held.
func (in *inbox[T]) grow() {
	size := min(max(2*len(in.ring), firstRing), in.max)
	ring := make([]entry[T], size)
	for k := range in.n {
		ring[k] = *in.at(k)
	}
	in.ring, in.head = ring, 0
}

// ack records that the item of t completed: the checkpoint moves past
// every completed item at the front of the window.
func (in *inbox[T]) ack(t ticket) {
	if !in.windowed {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.acked++
	if e := in.entry(t); e != nil {
		e.done = true
	}
	full := in.n >= in.max
	popped := 0
	for in.n > 0 && in.at(0).done {
		*in.at(0) = entry[T]{}
		in.head = (in.head + 1) % len(in.ring)
		in.n--
		popped++
	}
	if popped == 0 {
		return
	}
	in.replayAt = max(in.replayAt-popped, 0)
	if full {
		close(in.space)
		in.space = make(chan struct{})
	}
}

// entry returns the window's entry of t, or nil; mu is held.
func (in *inbox[T]) entry(t ticket) *entry[T] {
	if in.n == 0 {
		return nil
	}
	first := in.seq - uint64(in.n) + 1
	if t.seq < first || t.seq > in.seq {
		return nil
	}
	return in.at(int(t.seq - first))
}

// spent records what an attempt on the item of t that failed the node left
// (its calls and history), for the replay to carry on.
func (in *inbox[T]) spent(t ticket, fl *failure) {
	if !in.windowed {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if e := in.entry(t); e != nil {
		e.past = fl.again()
	}
}

// rewind makes the next reads replay the window from the checkpoint.
func (in *inbox[T]) rewind() {
	if !in.windowed {
		return
	}
	in.mu.Lock()
	in.replayAt = 0
	in.mu.Unlock()
}

// progress returns how many items completed.
func (in *inbox[T]) progress() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.acked
}
