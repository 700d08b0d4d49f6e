package pipeline

import (
	"context"
	"sync"
)

// A ticket names an item read through an inbox: its sequence number and the
// calls already spent on it before a restart replayed it.
type ticket struct {
	seq   uint64
	prior int
}

// An inbox is a node's input. Without node restart it is the edge's reader
// and nothing more. With node restart it also keeps the replay window: the
// items read but not yet completed (handed downstream, or ended), from the
// checkpoint (the oldest of them) to the read head. After a restart the
// node reads the window's items again before new ones. A full window stops
// reading until an item completes: backpressure, never an error.
//
// next is called by one goroutine at a time; ack and spent may be called
// concurrently with it and with each other.
type inbox[T any] struct {
	r        *reader[T]
	windowed bool
	max      int
	took     bool // an item was read; read only after the readers stopped

	mu       sync.Mutex
	entries  []entry[T] // from the checkpoint on, by sequence number
	replayAt int        // the next entry to read again; len(entries) when not replaying
	seq      uint64
	acked    int64
	space    chan struct{} // closed when an ack frees room in a full window
}

type entry[T any] struct {
	env   envelope[T]
	seq   uint64
	done  bool
	calls int
}

func newInbox[T any](r *reader[T], window int) *inbox[T] {
	return &inbox[T]{r: r, windowed: window > 0, max: window, space: make(chan struct{})}
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
	for in.replayAt < len(in.entries) {
		e := &in.entries[in.replayAt]
		in.replayAt++
		if !e.done {
			env, t := e.env, ticket{seq: e.seq, prior: e.calls}
			in.mu.Unlock()
			return env, t, true, nil
		}
	}
	for len(in.entries) >= in.max {
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
	in.seq++
	in.entries = append(in.entries, entry[T]{env: env, seq: in.seq})
	in.replayAt = len(in.entries)
	t := ticket{seq: in.seq}
	in.mu.Unlock()
	return env, t, true, nil
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
	i := int(t.seq - in.entries[0].seq)
	in.entries[i].done = true
	n := 0
	for n < len(in.entries) && in.entries[n].done {
		in.entries[n] = entry[T]{}
		n++
	}
	if n == 0 {
		return
	}
	full := len(in.entries) >= in.max
	in.entries = in.entries[n:]
	in.replayAt = max(in.replayAt-n, 0)
	if full {
		close(in.space)
		in.space = make(chan struct{})
	}
}

// spent records the calls made on the item of t by an attempt that failed,
// so that a replay knows how many it already had.
func (in *inbox[T]) spent(t ticket, calls int) {
	if !in.windowed {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if i := int(t.seq - in.entries[0].seq); i >= 0 && i < len(in.entries) {
		in.entries[i].calls = t.prior + calls
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
