package pipeline

import (
	"context"
	"sync"
)

// windowPerParked is the reorder window of an ordered Parallel node in
// items per MaxParked: the most items the node holds between reading one
// and handing its result over, 4096 by default. While the oldest item
// waits, the workers go on until the window is full, so it should hold
// what they call during a wait: with a tenth of the items parking, a
// window of four times MaxParked fills before MaxParked does.
const windowPerParked = 4

// A reorderWindow bounds the items of an ordered node between its dealer
// and its collector: the dealer takes room for a chunk before it sends it,
// the collector gives it back once the chunk's results were handed over.
// A chunk larger than the window passes when the window is empty, so that
// the node never stops for good. Only the dealer acquires, so one reused
// signal wakes it, with no allocation per wait.
type reorderWindow struct {
	max int

	mu      sync.Mutex
	used    int
	waiting bool          // the dealer waits for room
	room    chan struct{} // holds a token once room was given back to a waiting dealer
}

func newReorderWindow(max int) *reorderWindow {
	return &reorderWindow{max: max, room: make(chan struct{}, 1)}
}

// acquire takes room for n items, waiting until there is room or ctx
// ends; on ctx's end it takes nothing and returns ctx's cause. It is
// called by one goroutine at a time.
func (w *reorderWindow) acquire(ctx context.Context, n int) error {
	w.mu.Lock()
	for w.used > 0 && w.used+n > w.max {
		w.waiting = true
		w.mu.Unlock()
		select {
		case <-w.room:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		w.mu.Lock()
	}
	w.used += n
	w.mu.Unlock()
	return nil
}

// release gives back the room of n items.
func (w *reorderWindow) release(n int) {
	w.mu.Lock()
	w.used -= n
	if w.waiting {
		w.waiting = false
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}
